// Umbrella header: everything a program needs to use choir.
#ifndef CHOIR_CHOIR_H_
#define CHOIR_CHOIR_H_

#include "choir/communicator.h"
#include "choir/settings.h"
#include "choir/shared_buffer.h"
#include "choir/status.h"
#include "choir/store.h"
#include "choir/types.h"
#include "choir/version.h"

#endif  // CHOIR_CHOIR_H_
