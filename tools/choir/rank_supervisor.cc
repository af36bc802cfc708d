#include "rank_supervisor.h"

#include <fcntl.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/syscall.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/clock.h"
#include "base/logging.h"
#include "base/strings.h"
#include "transport/shm/segment.h"

namespace choir::cli {
namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string DescribeExit(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return fmt::format("was killed by signal {} ({})", sig, SignalName(sig));
  }
  return fmt::format("exited with code {}", WEXITSTATUS(wait_status));
}

bool Failed(int wait_status) {
  return WIFSIGNALED(wait_status) || (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) != 0);
}

// "rank 3" or "ranks 0,1,3".
std::string RankList(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + strings::FormatRanks(ranks);
}

// Memory policies name nodes below this (set_mempolicy's mask size here).
constexpr int kMaxNumaNodes = 1024;

// Runs in the forked child: only async-signal-safe calls until execve, because
// the launcher may have other threads (the store server) whose locks were
// copied in whatever state they were.
[[noreturn]] void ExecRank(const char* program, char* const* argv, char* const* envp, pid_t pgid,
                           pid_t launcher_pid, int dev_null, int out_fd, int err_fd, int exec_fd,
                           const SignalFd& signals, const cpu_set_t* cpus, const unsigned long* numa_mask) {
  ::setpgid(0, pgid);
  // Placement survives execve: the affinity, and the memory policy (prefer
  // the node, fall back to others when it is full).
  if (cpus != nullptr) ::sched_setaffinity(0, sizeof(cpu_set_t), cpus);
  if (numa_mask != nullptr) ::syscall(SYS_set_mempolicy, MPOL_PREFERRED, numa_mask, kMaxNumaNodes + 1);
  // Die with the launcher, even when it is SIGKILLed and cannot clean up.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher_pid) ::_exit(128 + SIGKILL);  // launcher already gone
  ::sigaction(SIGPIPE, &signals.original_sigpipe(), nullptr);
  ::sigaction(SIGCHLD, &signals.original_sigchld(), nullptr);
  ::sigprocmask(SIG_SETMASK, &signals.original_mask(), nullptr);
  ::dup2(dev_null, STDIN_FILENO);
  if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
  // dup2 onto the same number keeps close-on-exec; clear it explicitly.
  for (int fd = 0; fd <= 2; ++fd) ::fcntl(fd, F_SETFD, 0);
  // Nothing else of the launcher (store sockets, other ranks' pipes) may leak
  // into the rank; the exec error pipe closes on success this way too.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  ::execve(program, argv, envp);
  const int err = errno;
  (void)!::write(exec_fd, &err, sizeof(err));
  ::_exit(127);
}

}  // namespace

// ---------------------------------------------------------------- SignalFd

Result<std::unique_ptr<SignalFd>> SignalFd::Create() {
  std::unique_ptr<SignalFd> s(new SignalFd());
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : kStopSignals) sigaddset(&handled, sig);
  sigaddset(&handled, SIGCHLD);
  if (::pthread_sigmask(SIG_BLOCK, &handled, &s->original_mask_) != 0) {
    return ErrnoError(Code::kSystemError, errno, "blocking launcher signals");
  }
  s->fd_.Reset(::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!s->fd_.valid()) {
    const int err = errno;
    ::pthread_sigmask(SIG_SETMASK, &s->original_mask_, nullptr);
    return ErrnoError(Code::kSystemError, err, "signalfd()");
  }
  // Writing rank output to a closed pipe must not kill the launcher (and its
  // ranks with it): writes then fail with EPIPE and the output is dropped.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &s->original_sigpipe_);
  // An inherited SIG_IGN for SIGCHLD would make the kernel reap the ranks
  // itself, and the launcher could never learn their exit codes.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  ::sigaction(SIGCHLD, &default_action, &s->original_sigchld_);
  return s;
}

SignalFd::~SignalFd() {
  ::sigaction(SIGCHLD, &original_sigchld_, nullptr);
  ::sigaction(SIGPIPE, &original_sigpipe_, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &original_mask_, nullptr);
}

int SignalFd::ReadStopSignal() {
  int stop = 0;
  signalfd_siginfo info;
  while (::read(fd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig != SIGCHLD && stop == 0) stop = sig;
  }
  return stop;
}

// ---------------------------------------------------------------- RankSupervisor

RankSupervisor::RankSupervisor(SupervisorOptions options, SignalFd* signals)
    : options_(std::move(options)), signals_(signals) {}

RankSupervisor::~RankSupervisor() { KillAndReapAll(); }

double RankSupervisor::Elapsed() const { return NowSeconds() - start_seconds_; }

Status RankSupervisor::Start() {
  start_seconds_ = NowSeconds();
  Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) return ErrnoError(Code::kLaunchFailed, errno, "opening /dev/null");
  ranks_.resize(options_.ranks.size());
  for (size_t i = 0; i < options_.ranks.size(); ++i) {
    CHOIR_RETURN_IF_ERROR(Spawn(i, dev_null.get()));
  }
  return Status::Ok();
}

Status RankSupervisor::Spawn(size_t index, int dev_null) {
  Rank& rank = ranks_[index];
  rank.rank = options_.ranks[index].rank;

  // Everything the child needs is prepared before fork (no allocation after it).
  std::vector<char*> argv;
  for (std::string& a : options_.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : options_.ranks[index].env) envp.push_back(e.data());
  envp.push_back(nullptr);

  Fd out_read, out_write, err_read, err_write;
  if (options_.tag_output) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError(Code::kLaunchFailed, errno, "pipe2()");
    out_read.Reset(p[0]);
    out_write.Reset(p[1]);
    if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError(Code::kLaunchFailed, errno, "pipe2()");
    err_read.Reset(p[0]);
    err_write.Reset(p[1]);
  }
  int exec_pipe[2];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) return ErrnoError(Code::kLaunchFailed, errno, "pipe2()");
  Fd exec_read(exec_pipe[0]);
  Fd exec_write(exec_pipe[1]);

  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : options_.ranks[index].cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
  }
  const bool bind = CPU_COUNT(&cpus) > 0;
  unsigned long numa_mask[kMaxNumaNodes / (8 * sizeof(unsigned long))] = {};
  const int node = options_.ranks[index].numa;
  const bool prefer = node >= 0 && node < kMaxNumaNodes;
  if (prefer) numa_mask[static_cast<size_t>(node) / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));

  const pid_t launcher_pid = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    return ErrnoError(Code::kLaunchFailed, errno, fmt::format("fork() for rank {}", rank.rank));
  }
  if (pid == 0) {
    ExecRank(options_.program.c_str(), argv.data(), envp.data(), pgid_, launcher_pid, dev_null,
             out_write.get(), err_write.get(), exec_write.get(), *signals_, bind ? &cpus : nullptr,
             prefer ? numa_mask : nullptr);
  }
  // Also set the group from this side: whichever of parent and child runs
  // first, the rank is in the group before we ever signal it.
  if (pgid_ == 0) pgid_ = pid;
  ::setpgid(pid, pgid_);
  rank.pid = pid;
  rank.running = true;
  exec_write.Reset();
  out_write.Reset();
  err_write.Reset();

  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(exec_read.get(), &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    rank.running = false;
    rank.wait_status = status;
    return ErrnoError(Code::kLaunchFailed, exec_errno,
                      fmt::format("cannot execute '{}' for rank {}", options_.program, rank.rank));
  }

  if (options_.tag_output) {
    ::fcntl(out_read.get(), F_SETFL, O_NONBLOCK);
    ::fcntl(err_read.get(), F_SETFL, O_NONBLOCK);
    rank.out = std::move(out_read);
    rank.err = std::move(err_read);
    const std::string prefix = fmt::format("[{}] ", rank.rank);
    rank.out_tag = std::make_unique<TaggedStream>(STDOUT_FILENO, prefix);
    rank.err_tag = std::make_unique<TaggedStream>(STDERR_FILENO, prefix);
  }
  CHOIR_LOG(Debug, LAUNCH, "started rank {} as pid {}", rank.rank, pid);
  return Status::Ok();
}

int RankSupervisor::NumRunning() const {
  return static_cast<int>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
}

int RankSupervisor::NextTimeoutMs() const {
  // Wake at least this often, so a lost wake-up can never stall the launcher.
  constexpr int kMaxSleepMs = 500;
  double next = -1;
  if (grace_deadline_ >= 0 && !term_sent_) next = grace_deadline_;
  if (kill_deadline_ >= 0 && !kill_sent_)
    next = next < 0 ? kill_deadline_ : std::min(next, kill_deadline_);
  if (next < 0) return kMaxSleepMs;
  const double ms = (next - NowSeconds()) * 1000.0;
  return std::clamp(static_cast<int>(ms) + 1, 0, kMaxSleepMs);
}

int RankSupervisor::PollPipes(int extra_fd, int timeout_ms, bool* extra_ready) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Rank*, bool>> owners;  // (rank, is_err) per pipe entry
  if (extra_fd >= 0) fds.push_back({extra_fd, POLLIN, 0});
  for (Rank& r : ranks_) {
    if (r.out.valid()) {
      fds.push_back({r.out.get(), POLLIN, 0});
      owners.emplace_back(&r, false);
    }
    if (r.err.valid()) {
      fds.push_back({r.err.get(), POLLIN, 0});
      owners.emplace_back(&r, true);
    }
  }
  if (owners.empty() && extra_fd < 0) return -1;
  const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
  if (rc <= 0) return rc;
  const size_t first_pipe = extra_fd >= 0 ? 1 : 0;
  if (extra_ready != nullptr) *extra_ready = extra_fd >= 0 && fds[0].revents != 0;
  for (size_t i = first_pipe; i < fds.size(); ++i) {
    if (fds[i].revents != 0) Pump(*owners[i - first_pipe].first, owners[i - first_pipe].second);
  }
  return rc;
}

void RankSupervisor::PollOnce() {
  bool signalled = false;
  // A poll error is EINTR, or retried on the next round.
  if (PollPipes(signals_->fd(), NextTimeoutMs(), &signalled) > 0 && signalled) {
    if (const int sig = signals_->ReadStopSignal(); sig != 0) OnLauncherSignal(sig);
  }
}

void RankSupervisor::Pump(Rank& rank, bool is_err) {
  Fd& fd = is_err ? rank.err : rank.out;
  TaggedStream& tag = is_err ? *rank.err_tag : *rank.out_tag;
  char buf[64 * 1024];
  const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
  if (n > 0) {
    tag.Feed(std::string_view(buf, static_cast<size_t>(n)));
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  tag.Flush();  // end of stream (or a read error): the partial last line goes out
  fd.Reset();
}

namespace {

// Whether rank `pid` has ended (or cannot be waited for), without reaping
// it; `block`: wait until it has. A rank killed by a signal could not unlink
// its shared-memory segment (it does so once its peers have mapped it): it
// is removed here, while the rank is an unreaped zombie whose process id
// cannot belong to anyone else yet.
bool EndedRemovingSegments(pid_t pid, bool block) {
  siginfo_t info{};
  int rc = 0;
  while ((rc = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG))) < 0 &&
         errno == EINTR && block) {
  }
  if (rc != 0) return errno != EINTR;  // not our child any more: waitpid tells
  if (info.si_pid != pid) return false;  // still running
  if (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) {
    transport::Segment::RemoveLeftBy({static_cast<int>(pid)});
  }
  return true;
}

}  // namespace

void RankSupervisor::ReapExited() {
  // Failures are told apart by how the ranks ended: one killed by a signal
  // (before the launcher stopped anyone) is the cause, and the ones that
  // exited with an error code usually only reported losing it, even when they
  // were reaped first (a killed process with much memory takes a while to
  // become reapable, while its peers notice at once).
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    // One system call per running rank and round, as with waitpid alone.
    if (!EndedRemovingSegments(r.pid, /*block=*/false)) continue;
    int status = 0;
    const pid_t got = ::waitpid(r.pid, &status, WNOHANG);
    if (got == 0) continue;
    if (got < 0 && errno == EINTR) continue;
    r.running = false;
    r.wait_status = got == r.pid ? status : 0;
    r.exit_seconds = Elapsed();
    CHOIR_LOG(Debug, LAUNCH, "rank {} (pid {}) {}", r.rank, r.pid, DescribeExit(r.wait_status));
    const bool stopping = stop_signal_ != 0 || term_sent_;
    if (Failed(r.wait_status) && !stopping) {
      const bool replace = first_failure_ < 0 ||
                           (WIFSIGNALED(r.wait_status) &&
                            !WIFSIGNALED(ranks_[static_cast<size_t>(first_failure_)].wait_status));
      if (replace) first_failure_ = static_cast<int>(&r - ranks_.data());
      if (grace_deadline_ < 0) grace_deadline_ = NowSeconds() + options_.grace_seconds;
    }
  }
}

void RankSupervisor::SignalRunning(int sig) {
  // The group reaches the ranks' own children too; the per-pid kill covers a
  // rank that moved itself to another group.
  if (pgid_ > 0 && NumRunning() > 0) ::kill(-pgid_, sig);
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    ::kill(r.pid, sig);
    r.stopped_by_launcher = true;
  }
}

void RankSupervisor::OnLauncherSignal(int sig) {
  if (stop_signal_ != 0) {
    // A second interrupt: the user wants out now.
    SignalRunning(SIGKILL);
    kill_sent_ = true;
    return;
  }
  stop_signal_ = sig;
  CHOIR_LOG(Info, LAUNCH, "received {}, forwarding it to the ranks", SignalName(sig));
  SignalRunning(sig);
  term_sent_ = true;
  kill_deadline_ = NowSeconds() + options_.kill_delay_seconds;
}

void RankSupervisor::AdvanceStopSequence() {
  const double now = NowSeconds();
  if (grace_deadline_ >= 0 && !term_sent_ && now >= grace_deadline_) {
    if (NumRunning() > 0) SignalRunning(SIGTERM);
    term_sent_ = true;
    kill_deadline_ = now + options_.kill_delay_seconds;
  }
  if (kill_deadline_ >= 0 && !kill_sent_ && now >= kill_deadline_) {
    if (NumRunning() > 0) SignalRunning(SIGKILL);
    kill_sent_ = true;
  }
}

void RankSupervisor::DrainOutput(double max_seconds) {
  // Ranks have exited, but a child they left behind may still hold a pipe
  // open; read what is there without waiting for it forever.
  const double until = NowSeconds() + max_seconds;
  while (PollPipes(-1, std::max(0, static_cast<int>((until - NowSeconds()) * 1000)), nullptr) > 0) {
  }
  for (Rank& r : ranks_) {
    if (r.out_tag) r.out_tag->Flush();
    if (r.err_tag) r.err_tag->Flush();
    r.out.Reset();
    r.err.Reset();
  }
}

void RankSupervisor::KillAndReapAll() {
  if (NumRunning() > 0) SignalRunning(SIGKILL);
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    EndedRemovingSegments(r.pid, /*block=*/true);
    int status = 0;
    while (::waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.running = false;
    r.wait_status = status;
    r.exit_seconds = Elapsed();
  }
  // Children the ranks left behind in the job's group go too.
  if (pgid_ > 0 && ::kill(-pgid_, 0) == 0) ::kill(-pgid_, SIGKILL);
}

int RankSupervisor::Supervise() {
  while (NumRunning() > 0) {
    PollOnce();
    ReapExited();
    AdvanceStopSequence();
  }
  DrainOutput(/*max_seconds=*/0.5);
  KillAndReapAll();
  const std::string summary = Summary();
  if (!summary.empty()) fmt::print(stderr, "{}\n", summary);
  return ExitCode();
}

int RankSupervisor::ExitCode() const {
  if (first_failure_ >= 0) {
    const int status = ranks_[static_cast<size_t>(first_failure_)].wait_status;
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  }
  if (stop_signal_ != 0) return 128 + stop_signal_;
  return 0;
}

std::string RankSupervisor::Summary() const {
  std::vector<int> stopped;
  std::vector<int> exited_alone;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (static_cast<int>(i) == first_failure_) continue;
    (ranks_[i].stopped_by_launcher ? stopped : exited_alone).push_back(ranks_[i].rank);
  }
  std::string others;
  if (!exited_alone.empty()) others += "; " + RankList(exited_alone) + " exited by themselves";
  if (!stopped.empty()) others += "; stopped " + RankList(stopped);
  if (first_failure_ >= 0) {
    const Rank& r = ranks_[static_cast<size_t>(first_failure_)];
    const Status status(Code::kRankFailed,
                        fmt::format("rank {} (pid {}) {} after {:.1f} s{}", r.rank, r.pid,
                                    DescribeExit(r.wait_status), r.exit_seconds, others));
    return "choir run: " + status.ToString();
  }
  if (stop_signal_ != 0) {
    return fmt::format("choir run: received {}, forwarded it to the ranks{}",
                       SignalName(stop_signal_), others);
  }
  return "";
}

}  // namespace choir::cli
