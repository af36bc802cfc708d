// Starting, watching and stopping the ranks of one node for `choir run`.
//
// SignalFd turns the signals the launcher cares about (SIGINT, SIGTERM,
// SIGHUP, SIGCHLD) into a readable file descriptor, so the launcher waits for
// rank output, rank exits, signals and its own deadlines in one poll() loop
// instead of doing work in signal handlers.
//
// RankSupervisor forks and executes one process per rank, all in one new
// process group (so a signal reaches every rank and their children at once),
// with stdin from /dev/null and stdout/stderr through pipes that it copies to
// its own, prefixing lines with the rank. Each rank also gets
// PR_SET_PDEATHSIG=SIGKILL, so ranks die with the launcher even if the
// launcher itself is killed with SIGKILL.
//
// Failure handling: when a rank fails (nonzero exit or killed by a signal)
// the others get `grace_seconds` to exit by themselves (they usually report
// their own view of the failure, e.g. "peer lost"), then SIGTERM, then
// SIGKILL `kill_delay_seconds` later. SIGINT/SIGTERM/SIGHUP sent to the
// launcher are forwarded at once; SIGKILL follows `kill_delay_seconds` later
// or at a second signal. Every exit path (including the destructor) kills and
// reaps the ranks that are still running.
//
// Thread-safety: SignalFd must be created on the main thread before any other
// thread starts (threads inherit the blocked signal mask, so no thread is
// chosen to run a default handler). RankSupervisor is used from one thread.
#ifndef CHOIR_TOOLS_CHOIR_RANK_SUPERVISOR_H_
#define CHOIR_TOOLS_CHOIR_RANK_SUPERVISOR_H_

#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/fd.h"
#include "choir/status.h"
#include "tagged_output.h"

namespace choir::cli {

class SignalFd {
 public:
  static Result<std::unique_ptr<SignalFd>> Create();
  ~SignalFd();  // restores the signal mask and the SIGPIPE/SIGCHLD dispositions
  SignalFd(const SignalFd&) = delete;
  SignalFd& operator=(const SignalFd&) = delete;

  int fd() const { return fd_.get(); }
  // Reads pending signals; returns the first of SIGINT/SIGTERM/SIGHUP among
  // them, or 0 when only SIGCHLD (or nothing) was pending.
  int ReadStopSignal();

  // What a child must restore before exec (the launcher's changes must not leak).
  const sigset_t& original_mask() const { return original_mask_; }
  const struct sigaction& original_sigpipe() const { return original_sigpipe_; }
  const struct sigaction& original_sigchld() const { return original_sigchld_; }

 private:
  SignalFd() = default;
  Fd fd_;
  sigset_t original_mask_{};
  struct sigaction original_sigpipe_ {};
  struct sigaction original_sigchld_ {};
};

struct RankLaunch {
  int rank = 0;                  // global rank: output prefix and messages
  std::vector<std::string> env;  // the rank's whole environment, "KEY=VALUE"
  std::vector<int> cpus;         // CPUs to bind the rank to (empty: unbound)
  int numa = -1;                 // NUMA node to prefer for its memory (-1: none)
};

struct SupervisorOptions {
  std::string program;            // path to execute (already resolved)
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::vector<RankLaunch> ranks;
  bool tag_output = true;         // false: ranks write straight to our stdout/stderr
  double grace_seconds = 3;       // after a failure, before SIGTERM
  double kill_delay_seconds = 2;  // after SIGTERM, before SIGKILL
};

class RankSupervisor {
 public:
  RankSupervisor(SupervisorOptions options, SignalFd* signals);
  ~RankSupervisor();  // SIGKILLs and reaps every rank still running
  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;

  // Starts every rank. LaunchFailed names the program when one cannot be
  // executed; ranks started before it are killed by the destructor.
  Status Start();
  // Runs until every rank has exited, then prints a one-line summary to
  // stderr if something failed. Returns the launcher's exit code: 0, the exit
  // code of the first failed rank (128+signal if it was killed), or
  // 128+signal when the launcher itself was interrupted.
  int Supervise();

 private:
  struct Rank {
    int rank = 0;
    pid_t pid = -1;
    bool running = false;
    int wait_status = 0;
    double exit_seconds = 0;           // since Start()
    bool stopped_by_launcher = false;  // was still running when we signalled it
    Fd out;
    Fd err;
    std::unique_ptr<TaggedStream> out_tag;
    std::unique_ptr<TaggedStream> err_tag;
  };

  Status Spawn(size_t index, int dev_null);
  // Polls every open output pipe of the ranks (and `extra_fd` first when
  // >= 0) for up to `timeout_ms`, forwards what is readable and sets
  // *extra_ready. Returns poll's result, or -1 when there is nothing to poll.
  int PollPipes(int extra_fd, int timeout_ms, bool* extra_ready);
  void PollOnce();
  void Pump(Rank& rank, bool is_err);
  void ReapExited();
  void OnLauncherSignal(int sig);
  void AdvanceStopSequence();
  void SignalRunning(int sig);
  void DrainOutput(double max_seconds);
  void KillAndReapAll();
  int NumRunning() const;
  int NextTimeoutMs() const;
  double Elapsed() const;
  int ExitCode() const;
  std::string Summary() const;

  SupervisorOptions options_;
  SignalFd* signals_;
  std::vector<Rank> ranks_;
  pid_t pgid_ = 0;
  double start_seconds_ = 0;

  int first_failure_ = -1;  // index into ranks_
  int stop_signal_ = 0;     // first signal the launcher received
  double grace_deadline_ = -1;
  double kill_deadline_ = -1;
  bool term_sent_ = false;
  bool kill_sent_ = false;
};

}  // namespace choir::cli

#endif  // CHOIR_TOOLS_CHOIR_RANK_SUPERVISOR_H_
