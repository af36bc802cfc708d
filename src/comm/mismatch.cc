// Finding ranks that disagree about the current collective, and describing
// where every rank is when a collective times out.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/json_text.h"
#include "comm/comm_impl.h"

namespace choir::comm {

using algorithms::Signature;
using json = nlohmann::json;

Status CommImpl::MismatchError(const Signature& mine, uint64_t seq,
                               const transport::MsgHeader& expected, const transport::MsgHeader& got,
                               int peer) const {
  const std::string me = fmt::format("rank {} is at collective #{} {}", rank_, seq, mine.ToString());
  if (got.kind == static_cast<uint32_t>(transport::MsgKind::kCollective)) {
    const Signature theirs = Signature::Unpack(got.sig, got.count);
    if (got.seq != seq) {
      // Data of an earlier broadcast or scatter that this rank never read:
      // the ranks disagreed there (in its root, most likely), and the
      // senders did not wait for anybody.
      const bool rooted = got.seq < seq && (theirs.kind == algorithms::CollKind::kBroadcast ||
                                            theirs.kind == algorithms::CollKind::kScatter);
      return Status(Code::kCollectiveMismatch,
                    fmt::format("{} but rank {} sent data for collective #{} {}: {}", me, peer, got.seq,
                                theirs.ToString(),
                                rooted ? fmt::format("this rank never read it in #{}, so the ranks named different "
                                                     "roots or called different collectives there (or issued a "
                                                     "different number or order of collectives); make every rank "
                                                     "make the same calls with the same root",
                                                     got.seq)
                                          : "the ranks issued a different number or order of collectives"));
    }
    if (!(theirs == mine)) {
      return Status(Code::kCollectiveMismatch,
                    fmt::format("{} but rank {} called {} at the same step; make every rank issue the "
                                "same collective with the same arguments",
                                me, peer, theirs.ToString()));
    }
    return Status(Code::kCollectiveMismatch,
                  fmt::format("{} and expected a message of {} bytes from rank {}, which sent {} bytes: "
                              "the per-rank counts or splits differ between ranks",
                              me, expected.length, peer, got.length));
  }
  return Status(Code::kCollectiveMismatch,
                fmt::format("{} but rank {} sent a message of kind {}", me, peer, got.kind));
}

Status CommImpl::CheckSignatures(const Signature& mine, uint64_t seq, Deadline deadline) {
  // Every rank learns every signature: a ring allgather of two words each.
  algorithms::OpArgs args;
  args.dtype = DataType::kInt64;
  const uint64_t word[2] = {mine.PackedWord(), mine.count};
  std::vector<uint64_t> all(2 * static_cast<size_t>(size_));
  args.kind = algorithms::CollKind::kAllgather;
  args.send = word;
  args.recv = all.data();
  args.count = 2;
  Signature check;
  check.kind = algorithms::CollKind::kSignatureCheck;
  check.dtype = DataType::kInt64;
  check.count = 2;
  // Headers carry the check's own signature; a disagreement in sequence
  // number still shows up as a mismatch against this collective.
  OpObserver observer(this, mine, seq);
  transport::RunHooks hooks;
  hooks.deadline = deadline;
  hooks.observer = &observer;
  algorithms::Context ctx(*endpoint_, hooks, seq, check, args, scratch_);
  CHOIR_RETURN_IF_ERROR(algorithms::AllgatherRing(ctx, args));
  for (int r = 0; r < size_; ++r) {
    const Signature theirs = Signature::Unpack(all[2 * static_cast<size_t>(r)], all[2 * static_cast<size_t>(r) + 1]);
    if (!(theirs == mine)) {
      return Status(Code::kCollectiveMismatch,
                    fmt::format("rank {} is at collective #{} {} but rank {} called {} (full check)",
                                rank_, seq, mine.ToString(), r, theirs.ToString()));
    }
  }
  return Status::Ok();
}

Status CommImpl::OnStall(const Signature& mine, uint64_t seq, double waited) {
  const json status = {{"seq", seq}, {"sig", mine.PackedWord()}, {"count", mine.count},
                       {"what", mine.ToString()}, {"waited", waited}};
  if (!scoped_->Set("status/" + std::to_string(rank_), JsonDump(status)).ok()) return Status::Ok();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto text = scoped_->Get("status/" + std::to_string(r));
    if (!text.ok()) continue;
    const json other = json::parse(*text, nullptr, false);
    if (other.is_discarded() || !other.is_object()) continue;
    if (other.value("seq", uint64_t{0}) != seq) continue;
    const Signature theirs = Signature::Unpack(other.value("sig", uint64_t{0}), other.value("count", uint64_t{0}));
    if (!(theirs == mine)) {
      return Status(Code::kCollectiveMismatch,
                    fmt::format("rank {} is at collective #{} {} but rank {} waits in {} at the same "
                                "step (found after {:.1f} s without progress)",
                                rank_, seq, mine.ToString(), r, theirs.ToString(), waited));
    }
  }
  return Status::Ok();
}

std::string CommImpl::ProgressReport(uint64_t seq) {
  std::vector<std::string> lines;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto text = scoped_->Get("status/" + std::to_string(r));
    if (!text.ok()) {
      lines.push_back(fmt::format("rank {}: not waiting in any collective of this communicator "
                                  "(busy elsewhere, stuck outside choir, or not at #{} yet)", r, seq));
      continue;
    }
    const json other = json::parse(*text, nullptr, false);
    if (other.is_discarded() || !other.is_object()) continue;
    const uint64_t their_seq = other.value("seq", uint64_t{0});
    lines.push_back(fmt::format("rank {}: {} #{} {}{}", r, their_seq == seq ? "waiting in" : "last waited in",
                                their_seq, other.value("what", std::string("?")),
                                their_seq < seq ? " (behind this rank)" : ""));
  }
  std::string out = "Where the other ranks are:";
  for (const auto& l : lines) out += " [" + l + "]";
  return out;
}

}  // namespace choir::comm
