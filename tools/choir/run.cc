// `choir run`: the local launcher, with torchrun's flags and environment contract.
//
//   choir run -n N [--grace S] [--no-tag-output] [--] PROGRAM ARGS...
//   choir run --nnodes M --node-rank K --nproc-per-node P
//             --master-addr A --master-port Q [--timeout S] PROGRAM ARGS...
//
// Ports: MASTER_PORT is left for PyTorch's own TCPStore (rank 0 of a torch
// script creates it there), so the choir rendezvous store needs a port of its
// own. On one node both are free ports picked at start; with --master-port Q
// (always the case for several nodes) MASTER_PORT=Q and the choir store
// listens on Q+1, hosted by node 0's launcher. The store binds 127.0.0.1 for
// a loopback master address and 0.0.0.0 otherwise.
//
// Multi-node rendezvous (static, like torchrun's c10d backend without
// elasticity): every launcher connects to the store at A:Q+1, registers
// "launcher/node/K" (host, pid, ranks per node), and waits until all M nodes
// are there or the deadline (--timeout, else CHOIR_TIMEOUT) passes; the error
// then names the node ranks that never arrived. Node 0 keeps the store up
// until all ranks of its own node are done, and then (like torchrun's exit
// barrier) until every other node's launcher has reported "launcher/done/K",
// at most CHOIR_TIMEOUT after success and --grace after a failure.
//
// Environment of each rank: the launcher's own plus RANK (= K*P + local
// rank), WORLD_SIZE (= M*P), LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (node
// rank), GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, CHOIR_STORE_ADDR
// (host:port of the choir store), CHOIR_JOB_ID and CHOIR_LAUNCHER=1.
// Start-up, output, signals and failure handling: see rank_supervisor.h.
//
// Thread-safety: runs on the main thread; the store server has its own thread.
#include <fmt/format.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/json_text.h"
#include "base/logging.h"
#include "base/socket.h"
#include "base/strings.h"
#include "choir/settings.h"
#include "choir/store.h"
#include "topology/machine.h"
#include "rank_supervisor.h"
#include "subcommand.h"

extern char** environ;

namespace choir::cli {
namespace {

constexpr int kMaxProcsPerNode = 4096;
constexpr int kMaxNodes = 65536;
constexpr int kDefaultMasterPort = 29500;  // torchrun's default

std::string NodeKey(int node_rank) { return "launcher/node/" + std::to_string(node_rank); }
std::string DoneKey(int node_rank) { return "launcher/done/" + std::to_string(node_rank); }

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || strings::StartsWith(host, "127.");
}

std::string RandomJobId() {
  std::random_device device;
  return fmt::format("{:08x}{:08x}", device(), device());
}

// Finds what execve() will run: a path as given, or the first executable
// match in PATH. Checked before anything starts, so a typo fails at once.
Result<std::string> ResolveProgram(const std::string& name) {
  auto check = [](const std::string& path) -> Status {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return ErrnoError(Code::kLaunchFailed, errno, "cannot execute '" + path + "'");
    }
    if (S_ISDIR(st.st_mode)) {
      return Status(Code::kLaunchFailed, "cannot execute '" + path + "': it is a directory");
    }
    if (::access(path.c_str(), X_OK) != 0) {
      return Status(Code::kLaunchFailed, "cannot execute '" + path +
                                             "': not executable (chmod +x, or run it through "
                                             "its interpreter: choir run -n N python3 " +
                                             path + ")");
    }
    return Status::Ok();
  };
  if (name.find('/') != std::string::npos) {
    CHOIR_RETURN_IF_ERROR(check(name));
    return name;
  }
  const char* path_env = std::getenv("PATH");
  const std::string path_list = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& dir : strings::Split(path_list, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (check(candidate).ok()) return candidate;
  }
  return Status(Code::kLaunchFailed,
                fmt::format("cannot execute '{}': no executable of that name in PATH; give a "
                            "path (./{}) or fix PATH",
                            name, name));
}

// A port that was free a moment ago (the usual race: another process may take
// it before PyTorch binds it; torchrun picks MASTER_PORT the same way).
Result<int> PickFreePort(const std::string& host) {
  CHOIR_ASSIGN_OR_RETURN(Fd fd, net::Listen(host, 0));
  const int port = net::LocalPort(fd.get());
  if (port <= 0) return ErrnoError(Code::kSocketError, errno, "getsockname() of a probe socket");
  return port;
}

std::vector<std::string> RankEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view key = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& [name, value] : overrides) overridden = overridden || key == name;
    if (!overridden) env.emplace_back(entry);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  return env;
}

class RunCommand : public Subcommand {
 public:
  void Configure(CLI::App& app) override {
    app_ = &app;
    app.add_option("-n,--nproc-per-node,--nproc_per_node", nproc_per_node_,
                   "Ranks to start on this node.")
        ->default_val(1);
    app.add_option("--nnodes", nnodes_, "Number of nodes (one launcher per node).")->default_val(1);
    app.add_option("--node-rank,--node_rank", node_rank_, "Rank of this node, 0..nnodes-1.")
        ->default_val(0);
    app.add_option("--master-addr,--master_addr", master_addr_,
                   "Address of node 0 (default: MASTER_ADDR, else 127.0.0.1 on one node).");
    app.add_option("--master-port,--master_port", master_port_,
                   "MASTER_PORT for PyTorch's store; the choir store uses this port + 1.");
    app.add_option("--grace", grace_seconds_,
                   "Seconds the other ranks get to exit by themselves after one fails, "
                   "before SIGTERM (then SIGKILL 2 s later).")
        ->default_val(3.0);
    app.add_option("--timeout", timeout_text_,
                   "Deadline for all nodes to join (e.g. 30, 500ms, 5m; default CHOIR_TIMEOUT).");
    app.add_option("--job-id,--rdzv-id,--rdzv_id", job_id_,
                   "Job identity (default: CHOIR_JOB_ID, else random on one node and derived "
                   "from the master address on several).");
    app.add_flag("--tag-output,!--no-tag-output", tag_output_,
                 "Prefix each output line with its rank, e.g. \"[3] ...\" (default on).");
    app.add_option("--bind", bind_,
                   "auto: bind each rank to the CPUs and memory of its own NUMA node (an even share "
                   "of the CPUs this launcher may use; not when ranks outnumber CPUs); none: leave "
                   "ranks free.")
        ->check(CLI::IsMember({"auto", "none"}))
        ->default_val("auto");
    app.add_option("command", command_, "Program to run on every rank, and its arguments.");
    // Everything from the program name on belongs to the program, flags too.
    app.positionals_at_end();
    app.footer(
        "Sets RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE "
        "MASTER_ADDR MASTER_PORT CHOIR_STORE_ADDR CHOIR_JOB_ID CHOIR_LAUNCHER=1 for each rank. "
        "Exit code: 0, or the first failed rank's code (128+signal if killed).");
  }

  int Run() override {
    if (const int usage = Validate(); usage != 0) return usage;

    Result<std::string> program = ResolveProgram(command_[0]);
    if (!program.ok()) {
      ReportError(program.status());
      return kExitCannotExecute;
    }

    // Before any thread exists (the store server starts one).
    Result<std::unique_ptr<SignalFd>> signals = SignalFd::Create();
    if (!signals.ok()) return ReportError(signals.status());
    signals_ = signals->get();

    const int rendezvous = SetUpStore();
    if (rendezvous != 0) return rendezvous;

    SupervisorOptions options;
    options.program = *program;
    options.argv = command_;
    options.tag_output = tag_output_;
    options.grace_seconds = grace_seconds_;
    const int world_size = nnodes_ * nproc_per_node_;
    topology::BindingPlan binding;
    if (bind_ == "auto") {
      Result<topology::BindingPlan> planned = topology::PlanBindingHere(nproc_per_node_);
      // Binding only helps: when hwloc cannot read the machine, ranks run free.
      binding = planned.ok() ? *std::move(planned)
                             : topology::BindingPlan{{}, "binding: not bound (" + planned.status().ToString() + ")"};
      fmt::print(stderr, "choir run: {}\n", binding.summary);
    }
    for (int local = 0; local < nproc_per_node_; ++local) {
      const int rank = node_rank_ * nproc_per_node_ + local;
      options.ranks.push_back(
          RankLaunch{rank, RankEnvironment({{"RANK", std::to_string(rank)},
                                            {"WORLD_SIZE", std::to_string(world_size)},
                                            {"LOCAL_RANK", std::to_string(local)},
                                            {"LOCAL_WORLD_SIZE", std::to_string(nproc_per_node_)},
                                            {"GROUP_RANK", std::to_string(node_rank_)},
                                            {"GROUP_WORLD_SIZE", std::to_string(nnodes_)},
                                            {"MASTER_ADDR", master_addr_},
                                            {"MASTER_PORT", std::to_string(master_port_)},
                                            {"CHOIR_STORE_ADDR", store_addr_},
                                            {"CHOIR_JOB_ID", job_id_},
                                            {"CHOIR_LAUNCHER", "1"}})});
      if (!binding.ranks.empty()) {
        options.ranks.back().cpus = binding.ranks[static_cast<size_t>(local)].cpus;
        options.ranks.back().numa = binding.ranks[static_cast<size_t>(local)].numa;
      }
    }
    // server_ is a member and outlives this: ranks are stopped before the store goes away.
    RankSupervisor supervisor(std::move(options), signals_);
    if (Status s = supervisor.Start(); !s.ok()) {
      ReportError(s);
      ExitBarrier(/*success=*/false);
      return kExitCannotExecute;
    }
    const int exit_code = supervisor.Supervise();
    ExitBarrier(/*success=*/exit_code == 0);
    return exit_code;
  }

 private:
  // Returns 0 when the flags make sense, else prints a usage error and returns 2.
  int Validate() {
    if (command_.empty()) {
      return ReportUsageError(*app_, "no program given; e.g. choir run -n 2 python3 train.py");
    }
    if (nproc_per_node_ < 1 || nproc_per_node_ > kMaxProcsPerNode) {
      return ReportUsageError(*app_, fmt::format("-n/--nproc-per-node must be in 1..{}, got {}",
                                                 kMaxProcsPerNode, nproc_per_node_));
    }
    if (nnodes_ < 1 || nnodes_ > kMaxNodes) {
      return ReportUsageError(*app_,
                              fmt::format("--nnodes must be in 1..{}, got {}", kMaxNodes, nnodes_));
    }
    if (node_rank_ < 0 || node_rank_ >= nnodes_) {
      return ReportUsageError(
          *app_, fmt::format("--node-rank must be in 0..{} (--nnodes {}), got {}", nnodes_ - 1,
                             nnodes_, node_rank_));
    }
    if (!(grace_seconds_ >= 0 && grace_seconds_ <= 86400)) {
      return ReportUsageError(
          *app_,
          fmt::format("--grace must be between 0 and 86400 seconds, got {}", grace_seconds_));
    }
    // -1 stands for "not given"; given, it is a port like any other.
    if ((master_port_ != -1 || app_->count("--master-port") > 0) && (master_port_ < 1 || master_port_ > 65534)) {
      return ReportUsageError(
          *app_, fmt::format("--master-port must be in 1..65534 (the choir store uses port + 1), "
                             "got {}",
                             master_port_));
    }
    if (!timeout_text_.empty()) {
      const auto seconds = strings::ParseSeconds(timeout_text_);
      if (!seconds || *seconds <= 0) {
        return ReportUsageError(*app_, fmt::format("--timeout '{}' is not a positive duration "
                                                   "(e.g. 30, 500ms, 5m)",
                                                   timeout_text_));
      }
      timeout_seconds_ = *seconds;
    } else {
      const auto setting = FindSetting("CHOIR_TIMEOUT");
      timeout_seconds_ = setting ? strings::ParseSeconds(setting->value).value_or(300) : 300;
    }
    if (nnodes_ > 1) {
      if (master_addr_.empty()) {
        if (auto env = FindSetting("MASTER_ADDR"); env && IsSetByUser(*env))
          master_addr_ = env->value;
      }
      if (master_addr_.empty()) {
        return ReportUsageError(*app_,
                                "a job on several nodes needs --master-addr (or MASTER_ADDR): "
                                "the address of node 0 that every node can reach");
      }
      if (master_port_ == -1) {
        const auto env = FindSetting("MASTER_PORT");
        master_port_ = env && IsSetByUser(*env)
                           ? static_cast<int>(strings::ParseInt(env->value).value_or(0))
                           : kDefaultMasterPort;
        if (master_port_ < 1 || master_port_ > 65534) {
          return ReportUsageError(*app_,
                                  fmt::format("MASTER_PORT={} is outside 1..65534", master_port_));
        }
      }
    }
    // The job id names files, store keys and metrics labels on every node.
    const bool job_id_given = app_->count("--job-id") > 0;
    if (job_id_given && (job_id_.empty() || !std::all_of(job_id_.begin(), job_id_.end(), [](char c) {
                           return c > ' ' && c < 0x7f;
                         }))) {
      return ReportUsageError(*app_, "--job-id must be printable ASCII without spaces, got '" + job_id_ + "'");
    }
    if (master_addr_.empty()) master_addr_ = "127.0.0.1";
    // Node 0's ranks connect to the store by this name: one that does not
    // resolve there is a mistake to report now, not after their timeout.
    // Other nodes wait for it (a cluster DNS name may appear only once node
    // 0 runs) until the rendezvous deadline.
    if (Result<sockaddr_in> addr = net::Resolve(master_addr_, 0);
        node_rank_ == 0 && !addr.ok() && addr.status().code() == Code::kUnknownHost) {
      return ReportUsageError(*app_, "--master-addr (or MASTER_ADDR): " + addr.status().message() +
                                         "; give node 0's IPv4 address or a name every node resolves");
    }
    // A host's ranks share memory through segments that grow with the square
    // of their number. Whether the program's ranks make them is theirs to
    // know (each checks before it reserves: connect.cc), so a count this host
    // cannot hold is only a warning here.
    if (const Status room = CheckSharedMemoryRoom(nproc_per_node_, ""); !room.ok()) {
      fmt::print(stderr, "choir run: warning: {}\n", room.ToString());
    }
    return 0;
  }

  std::string ResolveJobId() const {
    if (!job_id_.empty()) return job_id_;
    if (auto setting = FindSetting("CHOIR_JOB_ID"); setting && IsSetByUser(*setting)) {
      return setting->value;
    }
    // Every node must agree without talking first: derive it from what they share.
    if (nnodes_ > 1) return fmt::format("choir-{}-{}", master_addr_, master_port_);
    return RandomJobId();
  }

  // Hosts (node 0) and joins (every node) the choir store; fills store_addr_,
  // master_port_ and job_id_. Returns 0 or the exit code after printing why.
  int SetUpStore() {
    job_id_ = ResolveJobId();
    const std::string bind_host = IsLoopback(master_addr_) ? master_addr_ : "0.0.0.0";
    int store_port = 0;
    if (master_port_ != -1) {
      store_port = master_port_ + 1;
    }
    if (node_rank_ == 0) {
      TcpStoreServerOptions options;
      options.host = bind_host;
      options.port = store_port;
      options.job_id = job_id_;
      Result<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(options);
      if (!server.ok()) {
        return ReportError(server.status().WithContext(fmt::format(
            "hosting the choir store on {}:{}{}", bind_host, store_port,
            master_port_ != -1 ? " (--master-port + 1; MASTER_PORT itself is left for PyTorch)"
                               : "")));
      }
      server_ = std::move(*server);
      store_port = server_->port();
    }
    if (master_port_ == -1) {
      Result<int> port = PickFreePort(bind_host);
      if (!port.ok()) return ReportError(port.status().WithContext("picking MASTER_PORT"));
      master_port_ = *port;
    }
    store_addr_ = fmt::format("{}:{}", master_addr_, store_port);
    CHOIR_LOG(Info, LAUNCH, "job {}: choir store at {}, MASTER_PORT {}", job_id_, store_addr_,
              master_port_);
    if (nnodes_ == 1) return 0;

    const Deadline deadline = Deadline::AfterSeconds(timeout_seconds_);
    Status status = JoinNodes(store_port, deadline);
    if (interrupted_ != 0) {
      fmt::print(stderr, "choir run: interrupted by signal {} while waiting for the other nodes\n",
                 interrupted_);
      return 128 + interrupted_;
    }
    if (!status.ok()) return ReportError(status);
    return 0;
  }

  // Sleeps up to `ms` unless SIGINT/SIGTERM/SIGHUP arrives (then interrupted_ is set).
  bool SleepUnlessInterrupted(int ms) {
    pollfd p{signals_->fd(), POLLIN, 0};
    if (::poll(&p, 1, ms) > 0) interrupted_ = signals_->ReadStopSignal();
    return interrupted_ == 0;
  }

  Status JoinNodes(int store_port, Deadline deadline) {
    // Connect in short slices so that Ctrl-C is honoured while node 0 is not up yet.
    std::shared_ptr<Store>& store = store_;
    Status last;
    while (store == nullptr) {
      TcpStoreClientOptions options;
      options.host = master_addr_;
      options.port = store_port;
      options.job_id = job_id_;
      options.timeout = std::chrono::milliseconds(
          std::clamp<int64_t>(deadline.RemainingNanos() / 1000000, 200, 2000));
      Result<std::shared_ptr<Store>> client = ConnectTcpStore(options);
      if (client.ok()) {
        store = *client;
        break;
      }
      last = client.status();
      // A name node 0's DNS record will give once it is up is worth waiting for.
      if (!GetErrorInfo(last.code()).retryable && last.code() != Code::kUnknownHost) return last;
      if (deadline.Expired()) {
        return Status(
            Code::kStoreUnreachable,
            fmt::format("node 0's launcher did not answer at {}:{} within {:.1f} s "
                        "(missing node ranks: 0); start `choir run --node-rank 0` "
                        "there with the same --nnodes/--master-port, and check that "
                        "{} is node 0's address as seen from this host. Last error: {}",
                        master_addr_, store_port, timeout_seconds_, master_addr_, last.ToString()));
      }
      if (!SleepUnlessInterrupted(100)) return Status::Ok();
    }

    const std::string me =
        JsonDump(nlohmann::json{{"host", HostName()}, {"pid", ::getpid()}, {"nproc", nproc_per_node_}});
    Result<std::string> registered = store->CompareSet(NodeKey(node_rank_), "", me);
    if (!registered.ok()) return registered.status().WithContext("registering this node");
    if (*registered != me) {
      return Status(Code::kInvalidArgument,
                    fmt::format("node rank {} is already taken by {} in job {}; give every "
                                "launcher its own --node-rank (or stop the launcher left from an "
                                "earlier run)",
                                node_rank_, *registered, job_id_));
    }

    std::vector<std::string> keys;
    for (int k = 0; k < nnodes_; ++k) keys.push_back(NodeKey(k));
    while (true) {
      Result<bool> all_here = store->Check(keys);
      if (!all_here.ok()) return all_here.status().WithContext("waiting for the other nodes");
      if (*all_here) break;
      if (deadline.Expired()) return MissingNodes(*store, keys);
      if (!SleepUnlessInterrupted(100)) return Status::Ok();
    }
    return CheckSameShape(*store, keys);
  }

  Status MissingNodes(Store& store, const std::vector<std::string>& keys) {
    std::vector<int> missing;
    for (int k = 0; k < nnodes_; ++k) {
      Result<bool> here = store.Check({keys[static_cast<size_t>(k)]});
      if (here.ok() && !*here) missing.push_back(k);
    }
    std::string list;
    for (int k : missing) list += (list.empty() ? "" : ",") + std::to_string(k);
    return Status(Code::kStoreTimeout,
                  fmt::format("only {} of {} nodes joined job {} at {} within {:.1f} s; missing "
                              "node ranks: {}. Start `choir run --node-rank N` with the same "
                              "--nnodes/--master-addr/--master-port on those hosts, or raise "
                              "--timeout (CHOIR_TIMEOUT) if they start slowly",
                              nnodes_ - static_cast<int>(missing.size()), nnodes_, job_id_,
                              store_addr_, timeout_seconds_, list));
  }

  // torchrun's static rendezvous assumes every node starts the same number of ranks.
  Status CheckSameShape(Store& store, const std::vector<std::string>& keys) {
    for (int k = 0; k < nnodes_; ++k) {
      Result<std::string> value = store.Get(keys[static_cast<size_t>(k)]);
      if (!value.ok()) return value.status().WithContext("reading node registrations");
      const nlohmann::json node =
          nlohmann::json::parse(*value, nullptr, /*allow_exceptions=*/false);
      if (!node.is_object() || !node.contains("nproc") || !node["nproc"].is_number_integer()) {
        return Status(Code::kStoreProtocol,
                      fmt::format("node {} registered '{}', which is not a choir launcher "
                                  "record; is another job using this store?",
                                  k, *value));
      }
      if (node["nproc"].get<int>() != nproc_per_node_) {
        return Status(Code::kInvalidArgument,
                      fmt::format("node {} ({}) starts {} ranks but this node starts {}; give "
                                  "every node the same --nproc-per-node",
                                  k, node.value("host", std::string("?")), node["nproc"].get<int>(),
                                  nproc_per_node_));
      }
    }
    return Status::Ok();
  }

  // Like torchrun's exit barrier: node 0 hosts the store, so it keeps it up
  // until the launchers of the other nodes are done too (their ranks may still
  // use it), bounded by the rendezvous timeout (by --grace after a failure).
  void ExitBarrier(bool success) {
    if (store_ == nullptr) return;
    store_->Set(DoneKey(node_rank_), "1").IgnoreError();  // node 0 may be gone: nothing to do
    if (node_rank_ != 0) return;
    const double limit = success ? timeout_seconds_ : grace_seconds_;
    const Deadline deadline = Deadline::AfterSeconds(limit);
    const Deadline announce_at = Deadline::AfterSeconds(1);  // quiet when the others end together
    bool announced = false;
    while (true) {
      std::vector<int> running;
      for (int k = 1; k < nnodes_; ++k) {
        Result<bool> done = store_->Check({DoneKey(k)});
        if (!done.ok()) return;
        if (!*done) running.push_back(k);
      }
      if (running.empty()) return;
      std::string list;
      for (int k : running) list += (list.empty() ? "" : ",") + std::to_string(k);
      if (deadline.Expired()) {
        fmt::print(stderr,
                   "choir run: nodes {} were still running after {:.1f} s; closing the choir "
                   "store they rendezvous through\n",
                   list, limit);
        return;
      }
      if (!announced && success && announce_at.Expired()) {
        fmt::print(stderr,
                   "choir run: this node's ranks are done; keeping the choir store up until "
                   "nodes {} finish (at most {:.0f} s)\n",
                   list, limit);
        announced = true;
      }
      if (!SleepUnlessInterrupted(100)) return;
    }
  }

  CLI::App* app_ = nullptr;
  int nproc_per_node_ = 1;
  int nnodes_ = 1;
  int node_rank_ = 0;
  std::string master_addr_;
  int master_port_ = -1;
  double grace_seconds_ = 3;
  std::string timeout_text_;
  double timeout_seconds_ = 300;
  std::string job_id_;
  bool tag_output_ = true;
  std::string bind_ = "auto";
  std::vector<std::string> command_;

  SignalFd* signals_ = nullptr;
  std::unique_ptr<TcpStoreServer> server_;  // node 0 only; outlives the ranks
  std::shared_ptr<Store> store_;            // several nodes only: client of node 0's store
  std::string store_addr_;
  int interrupted_ = 0;
};

}  // namespace

CHOIR_REGISTER_SUBCOMMAND(RunCommand, "run",
                          "Start N ranks of a program on this node (torchrun-compatible).");

}  // namespace choir::cli
