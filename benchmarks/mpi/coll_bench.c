// coll_bench: an MPI collective benchmark that reports the same figures as
// `choir perf`, so choir can be compared with Open MPI and MPICH on the same
// sizes (benchmarks/compare runs it).
//
//   mpirun -np N coll_bench
//       [--op allreduce,reduce_scatter,allgather,broadcast,reduce,alltoall,gather,scatter|all]
//       [--dtype float32|float64] [--reduce-op sum|max|min] [--min-bytes 8] [--max-bytes 256M]
//       [--step-factor 2] [--iters N | --time-per-size S | --iters-schedule S] [--warmup 5]
//       [--root 0] [--no-check] [--latency N] [--json FILE]
//
// Conventions are choir perf's (which are nccl-tests'): bytes is the per-rank
// buffer for allreduce, broadcast and reduce, and the whole buffer (n chunks)
// for reduce_scatter (MPI_Reduce_scatter_block), allgather and alltoall, and
// the root's whole buffer for gather and scatter.
// Every iteration is timed on every rank; an operation's time is the slowest
// rank's; mean, p50 and p99 are over iterations. algbw = bytes / mean;
// busbw = algbw x 2(n-1)/n (allreduce), x (n-1)/n (reduce_scatter,
// allgather, alltoall, gather, scatter), x 1 (broadcast, reduce). Rank 0 probes one call and
// chooses the iteration count (clamped to 5..100000) so that the timed loop
// fills --time-per-size; every rank runs that count. --iters-schedule
// "64K:200:10,1M:50:3,*:5:1" instead fixes iterations and warmup per size
// band (the first entry whose bytes >= the size; * = any size), which keeps
// a loaded machine from stretching the run (benchmarks/compare uses it).
//
// After timing, every size is checked once: inputs carry a rank- and
// position-dependent pattern, outputs are poisoned, and every element of
// every rank's output is compared exactly with the expected value.
//
// --latency N is the 8-byte allreduce latency mode: N individually timed
// calls (p50 / mean / p99), equivalent to
// --op allreduce --min-bytes 8 --max-bytes 8 --iters N --warmup 100.
//
// Output: a table on rank 0's stdout and, with --json, a file whose
// "results" rows have the keys of `choir perf --json` (op, bytes, count,
// mean_us, p50_us, p99_us, algbw_gbps, busbw_gbps as one-element lists,
// busbw_median, check).
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

// Op indices follow kOps.
enum {
  kAllreduce,
  kReduceScatter,
  kAllgather,
  kBcast,
  kReduce,
  kAlltoall,
  kGather,
  kScatter,
  kNumOps
};
enum { kMaxIters = 100000, kMinIters = 5 };
// Untimed 8-byte allreduces before the first size, as choir perf runs (with
// more ranks than CPUs the first calls of a launch are slower).
enum { kLaunchWarmupCalls = 100 };
static const char* const kOps[kNumOps] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                          "reduce",    "alltoall",       "gather",    "scatter"};

enum { kMaxBands = 16 };

// One band of --iters-schedule: sizes up to max_bytes use iters and warmup.
typedef struct {
  uint64_t max_bytes;
  long iters;
  int warmup;
} Band;

typedef struct {
  int ops[kNumOps];  // 1 when selected
  int float64;       // 0: float32, 1: float64
  const char* reduce_op;
  uint64_t min_bytes, max_bytes;
  double step_factor;
  long iters;  // 0: fill time_per_size
  double time_per_size;
  int warmup;
  int root;
  int check;
  const char* json_path;
  Band bands[kMaxBands];
  int nbands;  // 0: no schedule
} Options;

typedef struct {
  const char* op;
  uint64_t bytes;
  size_t count;
  long iters;
  double mean_us, p50_us, p99_us, algbw, busbw;
  const char* check;
} Row;

static int rank_ = 0, size_ = 1;

static void Die(const char* msg) {
  if (rank_ == 0) fprintf(stderr, "coll_bench: %s\n", msg);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

static double NowSeconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// "64", "4K", "256M", "1G" (binary units, like choir perf).
static int ParseBytes(const char* s, uint64_t* out) {
  char* end = NULL;
  const double v = strtod(s, &end);
  if (end == s || v < 0) return 0;
  double mult = 1;
  if (*end == 'k' || *end == 'K')
    mult = 1024.0;
  else if (*end == 'm' || *end == 'M')
    mult = 1024.0 * 1024;
  else if (*end == 'g' || *end == 'G')
    mult = 1024.0 * 1024 * 1024;
  else if (*end != '\0' && *end != 'b' && *end != 'B')
    return 0;
  *out = (uint64_t)(v * mult);
  return 1;
}

// "64K:200:10,1M:50:3,*:5:1" -> bands; returns 0 on a malformed schedule.
static int ParseSchedule(const char* text, Options* o) {
  o->nbands = 0;
  const char* p = text;
  while (*p) {
    if (o->nbands == kMaxBands) return 0;
    Band* b = &o->bands[o->nbands++];
    char field[64];
    const size_t len = strcspn(p, ":");
    if (len == 0 || len >= sizeof(field) || p[len] != ':') return 0;
    memcpy(field, p, len);
    field[len] = '\0';
    if (strcmp(field, "*") == 0)
      b->max_bytes = UINT64_MAX;
    else if (!ParseBytes(field, &b->max_bytes))
      return 0;
    char* end = NULL;
    b->iters = strtol(p + len + 1, &end, 10);
    if (*end != ':' || b->iters < 1) return 0;
    b->warmup = (int)strtol(end + 1, &end, 10);
    if ((*end != ',' && *end != '\0') || b->warmup < 0) return 0;
    p = *end == ',' ? end + 1 : end;
  }
  return o->nbands > 0;
}

static int OpIndex(const char* name, size_t len) {
  for (int i = 0; i < kNumOps; ++i) {
    if (strlen(kOps[i]) == len && strncmp(kOps[i], name, len) == 0) return i;
  }
  if (len == 5 && strncmp(name, "bcast", 5) == 0) return kBcast;
  return -1;
}

static void ParseOps(const char* list, Options* o) {
  memset(o->ops, 0, sizeof(o->ops));
  if (strcmp(list, "all") == 0) {
    for (int i = 0; i < kNumOps; ++i) o->ops[i] = 1;
    return;
  }
  const char* p = list;
  while (*p) {
    const char* comma = strchr(p, ',');
    const size_t len = comma ? (size_t)(comma - p) : strlen(p);
    const int i = OpIndex(p, len);
    if (i < 0)
      Die("unknown --op (allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall, "
          "gather, scatter, all)");
    o->ops[i] = 1;
    p += len + (comma ? 1 : 0);
  }
}

static void Usage(void) {
  if (rank_ != 0) return;
  printf(
      "usage: mpirun -np N coll_bench [--op LIST|all] [--dtype float32|float64]\n"
      "       [--reduce-op sum|max|min] [--min-bytes 8] [--max-bytes 256M] [--step-factor 2]\n"
      "       [--iters N | --time-per-size 0.2 | --iters-schedule BYTES:ITERS:WARMUP,...]\n"
      "       [--warmup 5] [--root 0] [--no-check] [--latency N] [--json FILE]\n");
}

static void ParseArgs(int argc, char** argv, Options* o) {
  static const struct option kLong[] = {{"op", required_argument, 0, 'o'},
                                        {"dtype", required_argument, 0, 'd'},
                                        {"reduce-op", required_argument, 0, 'r'},
                                        {"min-bytes", required_argument, 0, 'b'},
                                        {"max-bytes", required_argument, 0, 'e'},
                                        {"step-factor", required_argument, 0, 'f'},
                                        {"iters", required_argument, 0, 'n'},
                                        {"time-per-size", required_argument, 0, 't'},
                                        {"warmup", required_argument, 0, 'w'},
                                        {"root", required_argument, 0, 'R'},
                                        {"no-check", no_argument, 0, 'C'},
                                        {"latency", required_argument, 0, 'L'},
                                        {"json", required_argument, 0, 'j'},
                                        {"iters-schedule", required_argument, 0, 'S'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  *o = (Options){.float64 = 0,
                 .reduce_op = "sum",
                 .min_bytes = 8,
                 .max_bytes = 256u << 20,
                 .step_factor = 2,
                 .iters = 0,
                 .time_per_size = 0.2,
                 .warmup = 5,
                 .root = 0,
                 .check = 1,
                 .json_path = NULL};
  o->ops[kAllreduce] = 1;  // as choir perf
  int c;
  while ((c = getopt_long(argc, argv, "o:d:r:b:e:f:n:t:w:R:CL:j:S:h", kLong, NULL)) != -1) {
    switch (c) {
      case 'o':
        ParseOps(optarg, o);
        break;
      case 'd':
        if (strcmp(optarg, "float32") == 0)
          o->float64 = 0;
        else if (strcmp(optarg, "float64") == 0)
          o->float64 = 1;
        else
          Die("--dtype must be float32 or float64");
        break;
      case 'r':
        if (strcmp(optarg, "sum") && strcmp(optarg, "max") && strcmp(optarg, "min"))
          Die("--reduce-op must be sum, max or min");
        o->reduce_op = optarg;
        break;
      case 'b':
        if (!ParseBytes(optarg, &o->min_bytes)) Die("bad --min-bytes");
        break;
      case 'e':
        if (!ParseBytes(optarg, &o->max_bytes)) Die("bad --max-bytes");
        break;
      case 'f':
        o->step_factor = atof(optarg);
        break;
      case 'n':
        o->iters = atol(optarg);
        break;
      case 't':
        o->time_per_size = atof(optarg);
        break;
      case 'w':
        o->warmup = atoi(optarg);
        break;
      case 'R':
        o->root = atoi(optarg);
        break;
      case 'C':
        o->check = 0;
        break;
      case 'L':
        memset(o->ops, 0, sizeof(o->ops));
        o->ops[kAllreduce] = 1;
        o->min_bytes = o->max_bytes = 8;
        o->iters = atol(optarg);
        o->warmup = 100;
        break;
      case 'j':
        o->json_path = optarg;
        break;
      case 'S':
        if (!ParseSchedule(optarg, o)) Die("bad --iters-schedule (e.g. 64K:200:10,1M:50:3,*:5:1)");
        break;
      case 'h':
        Usage();
        MPI_Finalize();
        exit(0);
      default:
        Usage();
        Die("bad arguments");
    }
  }
  if (o->min_bytes == 0 || o->min_bytes > o->max_bytes)
    Die("--min-bytes/--max-bytes must satisfy 0 < min <= max");
  if (o->step_factor < 1.01) Die("--step-factor must be > 1");
  if (o->iters < 0 || o->warmup < 0 || o->time_per_size <= 0)
    Die("--iters >= 0, --warmup >= 0, --time-per-size > 0");
  if (o->root < 0 || o->root >= size_) Die("--root outside the communicator");
}

static int WholeBuffer(int op) {
  return op == kReduceScatter || op == kAllgather || op == kAlltoall || op == kGather ||
         op == kScatter;
}

// Elements of a rank's send and receive buffers for `count` per rank (the
// root's, for gather and scatter; every rank has them).
static size_t SendElems(int op, size_t count) {
  const int per_rank = op == kReduceScatter || op == kAlltoall || op == kScatter;
  return per_rank ? count * (size_t)size_ : count;
}
static size_t RecvElems(int op, size_t count) {
  const int per_rank = op == kAllgather || op == kAlltoall || op == kGather;
  return per_rank ? count * (size_t)size_ : count;
}

static double BusFactor(int op) {
  if (op == kAllreduce) return 2.0 * (size_ - 1) / size_;
  if (op == kBcast || op == kReduce) return 1.0;
  return (double)(size_ - 1) / size_;
}

// --- buffers and the operation under test -------------------------------

typedef struct {
  char *send, *recv;
  size_t es;
  MPI_Datatype type;
  MPI_Op reduce;
  int root;
} Buffers;

static void Issue(const Buffers* b, int op, size_t count) {
  const int c = (int)count;
  int rc = MPI_SUCCESS;
  switch (op) {
    case kAllreduce:
      rc = MPI_Allreduce(b->send, b->recv, c, b->type, b->reduce, MPI_COMM_WORLD);
      break;
    case kReduceScatter:
      rc = MPI_Reduce_scatter_block(b->send, b->recv, c, b->type, b->reduce, MPI_COMM_WORLD);
      break;
    case kAllgather:
      rc = MPI_Allgather(b->send, c, b->type, b->recv, c, b->type, MPI_COMM_WORLD);
      break;
    case kBcast:
      rc = MPI_Bcast(rank_ == b->root ? b->send : b->recv, c, b->type, b->root, MPI_COMM_WORLD);
      break;
    case kReduce:
      rc = MPI_Reduce(b->send, b->recv, c, b->type, b->reduce, b->root, MPI_COMM_WORLD);
      break;
    case kGather:
      rc = MPI_Gather(b->send, c, b->type, b->recv, c, b->type, b->root, MPI_COMM_WORLD);
      break;
    case kScatter:
      rc = MPI_Scatter(b->send, c, b->type, b->recv, c, b->type, b->root, MPI_COMM_WORLD);
      break;
    default:
      rc = MPI_Alltoall(b->send, c, b->type, b->recv, c, b->type, MPI_COMM_WORLD);
      break;
  }
  if (rc != MPI_SUCCESS) Die("MPI collective failed");
}

// Input element j of rank r: small integers, so sums are exact in float32.
static double Pattern(int r, size_t j) { return (double)(3 * r + (int)(j % 509)); }

static void Store(const Buffers* b, char* base, size_t j, double v) {
  if (b->es == 4)
    ((float*)base)[j] = (float)v;
  else
    ((double*)base)[j] = v;
}

static double Load(const Buffers* b, const char* base, size_t j) {
  return b->es == 4 ? (double)((const float*)base)[j] : ((const double*)base)[j];
}

enum ReduceKind { kSum, kMax, kMin };

// The reduction of Pattern over all ranks at position j, in closed form.
static double Reduced(enum ReduceKind kind, size_t j) {
  const double base = (double)(j % 509), n = (double)size_;
  if (kind == kSum) return n * base + 3.0 * n * (n - 1) / 2;
  if (kind == kMax) return base + 3.0 * (n - 1);
  return base;
}

static void FillInput(const Buffers* b, size_t send_elems) {
  for (size_t j = 0; j < send_elems; ++j) Store(b, b->send, j, Pattern(rank_, j));
}

// Runs the operation once on patterned inputs and poisoned outputs and
// compares every output element on every rank. Returns 1 when all match.
static int Check(const Buffers* b, int op, size_t count, const char* reduce_op) {
  const size_t recv_elems = RecvElems(op, count);
  for (size_t j = 0; j < recv_elems; ++j) Store(b, b->recv, j, -1.0);
  Issue(b, op, count);
  // reduce and gather write only the root's output; broadcast's root sends
  // from `send`.
  const int root_only = op == kReduce || op == kGather;
  const int has_output = !(root_only && rank_ != b->root) && !(op == kBcast && rank_ == b->root);
  const enum ReduceKind rop =
      strcmp(reduce_op, "sum") == 0 ? kSum : (strcmp(reduce_op, "max") == 0 ? kMax : kMin);
  int ok = 1;
  for (size_t j = 0; has_output && ok && j < recv_elems; ++j) {
    double want;
    switch (op) {
      case kAllreduce:
      case kReduce:
        want = Reduced(rop, j);
        break;
      case kReduceScatter:
        want = Reduced(rop, (size_t)rank_ * count + j);
        break;
      case kAllgather:
      case kGather:
        want = Pattern((int)(j / count), j % count);
        break;
      case kBcast:
        want = Pattern(b->root, j);
        break;
      case kScatter:
        want = Pattern(b->root, (size_t)rank_ * count + j);
        break;
      default:
        want = Pattern((int)(j / count), (size_t)rank_ * count + j % count);
        break;
    }
    if (Load(b, b->recv, j) != want) ok = 0;
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all_ok;
}

// --- timing ---------------------------------------------------------------

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// Linear interpolation between closest ranks, as choir perf.
static double Percentile(const double* sorted, size_t n, double p) {
  if (n == 0) return 0;
  const double pos = p * (double)(n - 1);
  const size_t lo = (size_t)pos;
  const size_t hi = lo + 1 < n ? lo + 1 : n - 1;
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - (double)lo);
}

static void Measure(const Buffers* b, const Options* o, int op, size_t count, Row* row) {
  long iters = o->iters;
  int warmup = o->warmup;
  for (int k = 0; k < o->nbands; ++k) {
    if (row->bytes <= o->bands[k].max_bytes) {
      iters = o->bands[k].iters;
      warmup = o->bands[k].warmup;
      break;
    }
  }
  for (int i = 0; i < warmup; ++i) Issue(b, op, count);
  if (iters == 0) {
    const double t0 = NowSeconds();
    Issue(b, op, count);
    double one = NowSeconds() - t0;
    if (one < 1e-7) one = 1e-7;
    const double want = o->time_per_size / one;
    iters = want < kMinIters ? kMinIters : (want > kMaxIters ? kMaxIters : (long)want);
  }
  MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  double* mine = malloc(sizeof(double) * (size_t)iters);
  double* slowest = malloc(sizeof(double) * (size_t)iters);
  if (!mine || !slowest) Die("out of memory for timings");
  for (long i = 0; i < iters; ++i) {
    const double t0 = NowSeconds();
    Issue(b, op, count);
    mine[i] = (NowSeconds() - t0) * 1e6;
  }
  // Nobody leaves the timed loop before all have finished it, as in choir perf.
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Reduce(mine, slowest, (int)iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank_ == 0) {
    double sum = 0;
    for (long i = 0; i < iters; ++i) sum += slowest[i];
    qsort(slowest, (size_t)iters, sizeof(double), CompareDoubles);
    row->iters = iters;
    row->mean_us = sum / (double)iters;
    row->p50_us = Percentile(slowest, (size_t)iters, 0.5);
    row->p99_us = Percentile(slowest, (size_t)iters, 0.99);
    row->algbw = (double)row->bytes / (row->mean_us * 1e-6) / 1e9;
    row->busbw = row->algbw * BusFactor(op);
  }
  free(mine);
  free(slowest);
}

// --- output ---------------------------------------------------------------

static void JsonString(FILE* f, const char* s) {
  fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void WriteJson(const Options* o, const char* library, const Row* rows, size_t nrows) {
  FILE* f = fopen(o->json_path, "w");
  if (!f) {
    fprintf(stderr, "coll_bench: cannot write --json file %s\n", o->json_path);
    return;
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  fprintf(f, "{\n  \"tool\": \"coll_bench\",\n  \"library\": ");
  JsonString(f, library);
  fprintf(f, ",\n  \"ranks\": %d,\n  \"machine\": {\"hostname\": ", size_);
  JsonString(f, host);
  fprintf(f, ", \"online_cpus\": %ld},\n  \"repeat\": 1,\n  \"root\": %d,\n  \"results\": [",
          sysconf(_SC_NPROCESSORS_ONLN), o->root);
  for (size_t i = 0; i < nrows; ++i) {
    const Row* r = &rows[i];
    fprintf(f,
            "%s\n    {\"op\": \"%s\", \"bytes\": %llu, \"count\": %zu, \"dtype\": \"%s\", "
            "\"reduce_op\": \"%s\", "
            "\"iters\": %ld, \"mean_us\": [%.6g], \"p50_us\": [%.6g], \"p99_us\": [%.6g], "
            "\"algbw_gbps\": [%.6g], "
            "\"busbw_gbps\": [%.6g], \"busbw_median\": %.6g, \"busbw_spread\": 0, \"algorithm\": "
            "\"mpi\", "
            "\"check\": \"%s\"}",
            i ? "," : "", r->op, (unsigned long long)r->bytes, r->count,
            o->float64 ? "float64" : "float32", o->reduce_op, r->iters, r->mean_us, r->p50_us,
            r->p99_us, r->algbw, r->busbw, r->busbw, r->check);
  }
  fprintf(f, "\n  ]\n}\n");
  if (fclose(f) != 0) fprintf(stderr, "coll_bench: error writing %s\n", o->json_path);
}

static void PrintRow(const Row* r) {
  printf("  %12llu %12zu %11.2f %11.2f %11.2f %9.3f %9.3f  %s\n", (unsigned long long)r->bytes,
         r->count, r->mean_us, r->p50_us, r->p99_us, r->algbw, r->busbw,
         r->check[0] ? r->check : "-");
  fflush(stdout);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  Options o;
  ParseArgs(argc, argv, &o);

  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(library, &len);
  char* newline = strchr(library, '\n');
  if (newline) *newline = '\0';

  uint64_t sizes[128];
  size_t nsizes = 0;
  for (double v = (double)o.min_bytes; v <= (double)o.max_bytes * 1.0000001 && nsizes < 128;
       v *= o.step_factor) {
    sizes[nsizes++] = (uint64_t)llround(v);
  }

  Buffers b = {.es = o.float64 ? 8 : 4, .type = o.float64 ? MPI_DOUBLE : MPI_FLOAT, .root = o.root};
  b.reduce = strcmp(o.reduce_op, "max") == 0
                 ? MPI_MAX
                 : (strcmp(o.reduce_op, "min") == 0 ? MPI_MIN : MPI_SUM);
  // Largest send and receive buffers over the selected ops (elements * es).
  size_t send_max = 0, recv_max = 0;
  for (int op = 0; op < kNumOps; ++op) {
    if (!o.ops[op]) continue;
    const size_t count = (size_t)(o.max_bytes / b.es / (WholeBuffer(op) ? (uint64_t)size_ : 1));
    const size_t s = SendElems(op, count);
    const size_t r = RecvElems(op, count);
    if (s * b.es > send_max) send_max = s * b.es;
    if (r * b.es > recv_max) recv_max = r * b.es;
  }
  if (posix_memalign((void**)&b.send, 4096, send_max + 64) ||
      posix_memalign((void**)&b.recv, 4096, recv_max + 64)) {
    Die("out of memory for buffers");
  }
  memset(b.send, 0, send_max + 64);
  memset(b.recv, 0, recv_max + 64);

  if (rank_ == 0) {
    printf("# coll_bench: %d ranks, %s %s, %zu sizes from %llu to %llu B, %s\n", size_,
           o.float64 ? "float64" : "float32", o.reduce_op, nsizes, (unsigned long long)o.min_bytes,
           (unsigned long long)o.max_bytes, library);
  }
  for (int i = 0; i < kLaunchWarmupCalls; ++i) {
    long x = rank_, y = 0;
    MPI_Allreduce(&x, &y, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
  }
  Row* rows = calloc((size_t)kNumOps * nsizes + 1, sizeof(Row));
  size_t nrows = 0;
  int all_ok = 1;
  for (int op = 0; op < kNumOps; ++op) {
    if (!o.ops[op]) continue;
    if (rank_ == 0) {
      printf("#\n# %s\n# %12s %12s %11s %11s %11s %9s %9s  %s\n", kOps[op], "bytes", "count",
             "mean(us)", "p50(us)", "p99(us)", "algbw", "busbw", "check");
    }
    for (size_t s = 0; s < nsizes; ++s) {
      const uint64_t per = b.es * (WholeBuffer(op) ? (uint64_t)size_ : 1);
      const size_t count = (size_t)(sizes[s] / per);
      if (count == 0) continue;
      if (count > (size_t)0x7fffffff) Die("count does not fit MPI's int");
      Row* row = &rows[nrows++];
      row->op = kOps[op];
      row->count = count;
      row->bytes = (uint64_t)count * per;
      row->check = "";
      FillInput(&b, SendElems(op, count));
      Measure(&b, &o, op, count, row);
      if (o.check) {
        const int ok = Check(&b, op, count, o.reduce_op);
        row->check = ok ? "ok" : "FAILED";
        all_ok = all_ok && ok;
      }
      if (rank_ == 0) PrintRow(row);
    }
  }
  if (rank_ == 0 && o.json_path) WriteJson(&o, library, rows, nrows);
  free(rows);
  free(b.send);
  free(b.recv);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
