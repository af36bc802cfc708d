#!/usr/bin/env python3
"""Tests of benchmarks/compare's summary: the targets it judges from a run's figures.

They build the figures of a run by hand (no library runs), so each verdict
and each line of text can be checked exactly.
"""

import importlib.machinery
import importlib.util
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def load_compare():
    loader = importlib.machinery.SourceFileLoader("compare", os.path.join(HERE, "compare"))
    spec = importlib.util.spec_from_loader("compare", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


compare = load_compare()


def sweep(op, rows):
    """A choir perf / coll_bench JSON document: rows of (bytes, busbw GB/s, algorithm or None)."""
    results = []
    for b, busbw, alg in rows:
        r = {"op": op, "bytes": b, "busbw_gbps": [busbw], "busbw_median": busbw}
        if alg:
            r["algorithm"] = alg
        results.append(r)
    return {"results": results}


def run(figures):
    """Results from {(lib, op): [per repeat: [(bytes, busbw, algorithm)]]}; a None repeat did not run."""
    res = compare.Results()
    for (lib, op), repeats in figures.items():
        for rep, rows in enumerate(repeats):
            if rows is not None:
                res.add_sweep(lib, [sweep(op, rows)], rep)
    return res


def targets(res, libs, ops):
    ratios = {op: compare.busbw_table(res, op, libs)[1] for op in ops}
    return compare.targets_section(res, ratios, libs)


def rows_of(lines, start):
    return [x for x in lines if x.startswith(start)]


class EverySizeTarget(unittest.TestCase):
    LIBS = ["choir", "openmpi", "mpich"]

    def test_met_when_no_cell_is_below(self):
        res = run({
            ("choir", "broadcast"): [[(16, 2.0, "shm_flat"), (64, 4.0, "shm_flat")]] * 3,
            ("openmpi", "broadcast"): [[(16, 1.0, None), (64, 4.0, None)]] * 3,  # level counts as met
            ("mpich", "broadcast"): [[(16, 1.5, None), (64, 3.0, None)]] * 3,
        })
        lines = targets(res, self.LIBS, ["broadcast"])
        self.assertEqual(rows_of(lines, "| every size"), [
            "| every size ≥ the best peer | heap | 16 B–64 B, 1 op, 2 cells | lowest 1.00x (broadcast 64 B) | yes |"])
        self.assertFalse(any(x.startswith("Cells below") for x in lines))

    def test_lists_each_cell_below_with_its_peer_repeats_and_switch_point(self):
        # broadcast 64 B: choir 0.5 in the median against MPICH's 1.0; slower in 2 of 3 repeats.
        # allreduce 1 KiB: below Open MPI in all 3 repeats, where the pipe takes over from the slots.
        res = run({
            ("choir", "broadcast"): [[(16, 3.0, "shm_flat"), (64, 0.5, "shm_flat")],
                                     [(16, 3.0, "shm_flat"), (64, 0.4, "shm_flat")],
                                     [(16, 3.0, "shm_flat"), (64, 2.0, "shm_flat")]],
            ("openmpi", "broadcast"): [[(16, 1.0, None), (64, 0.2, None)]] * 3,
            ("mpich", "broadcast"): [[(16, 1.0, None), (64, 1.0, None)]] * 3,
            ("choir", "allreduce"): [[(256, 1.0, "shm_flat"), (1024, 1.5, "shm_pipe"), (4096, 9.0, "shm_pipe")]] * 3,
            ("openmpi", "allreduce"): [[(256, 1.0, None), (1024, 2.0, None), (4096, 3.0, None)]] * 3,
            ("mpich", "allreduce"): [[(256, 0.5, None), (1024, 1.0, None), (4096, 3.0, None)]] * 3,
        })
        lines = targets(res, self.LIBS, ["allreduce", "broadcast"])
        self.assertEqual(rows_of(lines, "| every size"), [
            "| every size ≥ the best peer | heap | 16 B–4 KiB, 2 ops, 5 cells | lowest 0.50x (broadcast 64 B) | "
            "no: 2 cells below, 1 of them in every repeat both ran |"])
        self.assertEqual(rows_of(lines, "- heap"), [
            "- heap, 2 cells: allreduce 1 KiB 0.75x (Open MPI; slower in 3 of 3 repeats; shm_pipe, a switch point: "
            "shm_flat at 256 B), broadcast 64 B 0.50x (MPICH; slower in 2 of 3 repeats; shm_flat)."])

    def test_pairs_only_the_repeats_both_ran(self):
        # choir's second launch failed: the cell is judged on repeats 1 and 3 alone.
        res = run({
            ("choir", "reduce"): [[(16, 0.5, "shm_flat")], None, [(16, 0.6, "shm_flat")]],
            ("openmpi", "reduce"): [[(16, 1.0, None)], [(16, 1.0, None)], [(16, 1.0, None)]],
        })
        lines = targets(res, ["choir", "openmpi"], ["reduce"])
        self.assertEqual(rows_of(lines, "- heap"), [
            "- heap, 1 cell: reduce 16 B 0.55x (Open MPI; slower in 2 of 2 repeats; shm_flat)."])
        self.assertEqual(rows_of(lines, "| every size")[0].rsplit("|", 2)[1], " no: 1 cell below, 1 of them in every repeat both ran ")

    def test_one_repeat_is_not_called_below_in_every_repeat(self):
        res = run({
            ("choir", "alltoall"): [[(16, 0.5, None)]],
            ("mpich", "alltoall"): [[(16, 1.0, None)]],
        })
        lines = targets(res, ["choir", "mpich"], ["alltoall"])
        self.assertEqual(rows_of(lines, "| every size"), [
            "| every size ≥ the best peer | heap | 16 B, 1 op, 1 cell | lowest 0.50x (alltoall 16 B) | "
            "no: 1 cell below, 0 of them in every repeat both ran (1 with one such repeat or none, not counted) |"])
        self.assertEqual(rows_of(lines, "- heap"), ["- heap, 1 cell: alltoall 16 B 0.50x (MPICH; slower in 1 of 1 repeat)."])

    def test_each_choir_column_is_judged_on_its_own(self):
        res = run({
            ("choir", "allgather"): [[(1024, 1.0, "cma")]] * 2,
            ("choir-shared", "allgather"): [[(1024, 3.0, "shm_pipe")]] * 2,
            ("openmpi", "allgather"): [[(1024, 2.0, None)]] * 2,
        })
        lines = targets(res, ["choir", "choir-shared", "openmpi"], ["allgather"])
        self.assertEqual(rows_of(lines, "| every size"), [
            "| every size ≥ the best peer | heap | 1 KiB, 1 op, 1 cell | lowest 0.50x (allgather 1 KiB) | "
            "no: 1 cell below, 1 of them in every repeat both ran |",
            "| every size ≥ the best peer | SharedBuffer | 1 KiB, 1 op, 1 cell | lowest 1.50x (allgather 1 KiB) | "
            "yes |"])
        self.assertEqual(rows_of(lines, "- "), [
            "- heap, 1 cell: allgather 1 KiB 0.50x (Open MPI; slower in 2 of 2 repeats; cma)."])

    def test_a_bracket_is_no_switch_and_neighbours_are_choirs_own_sizes(self):
        # 16 KiB is below Open MPI. Its neighbours are choir's 4 KiB (the same main route, its calls
        # counted otherwise) and 64 KiB (cma: a switch), though no peer measured 4 KiB.
        res = run({
            ("choir", "allreduce"): [[(1024, 3.0, "shm_flat"), (4096, 3.0, "shm_pipe"),
                                      (16384, 1.0, "shm_pipe (3x +stream)"), (65536, 9.0, "cma")]] * 2,
            ("openmpi", "allreduce"): [[(1024, 1.0, None), (16384, 2.0, None), (65536, 3.0, None)]] * 2,
        })
        lines = targets(res, ["choir", "openmpi"], ["allreduce"])
        self.assertEqual(rows_of(lines, "- heap"), [
            "- heap, 1 cell: allreduce 16 KiB 0.50x (Open MPI; slower in 2 of 2 repeats; shm_pipe (3x +stream), "
            "a switch point: cma at 64 KiB)."])

    def test_no_row_without_a_peer(self):
        # Every peer failed: there is no ratio to judge, and no row claims one.
        res = run({("choir", "allreduce"): [[(16, 1.0, "shm_flat")]] * 2})
        lines = targets(res, ["choir", "openmpi"], ["allreduce"])
        self.assertEqual(rows_of(lines, "| every size"), [])


class RatioTarget(unittest.TestCase):
    def test_a_missed_size_gives_its_ratio_launch_by_launch_against_the_same_peer(self):
        # allgather at 1 MiB: medians 12 against 8 (1.50x, met); at 4 MiB 11 against 8 (1.38x,
        # missed), the repeats 1.36x, 1.62x, 1.10x against Open MPI, the best peer by median
        # (MPICH, slower, does not count). Choir's third launch at 16 MiB failed: there the
        # medians are 4.5 against 4 (1.12x) and two repeats pair, 3.00x and 0.75x.
        res = run({
            ("choir", "allgather"): [[(1 << 20, 12.0, "shm_pipe"), (4 << 20, 11.0, "shm_pipe"), (16 << 20, 6.0, "shm_pipe")],
                                     [(1 << 20, 12.0, "shm_pipe"), (4 << 20, 13.0, "shm_pipe"), (16 << 20, 3.0, "shm_pipe")],
                                     [(1 << 20, 12.0, "shm_pipe"), (4 << 20, 8.8, "shm_pipe")]],
            ("openmpi", "allgather"): [[(1 << 20, 8.0, None), (4 << 20, 8.1, None), (16 << 20, 2.0, None)],
                                       [(1 << 20, 8.0, None), (4 << 20, 8.0, None), (16 << 20, 4.0, None)],
                                       [(1 << 20, 8.0, None), (4 << 20, 8.0, None), (16 << 20, 9.0, None)]],
            ("mpich", "allgather"): [[(1 << 20, 1.0, None), (4 << 20, 1.0, None), (16 << 20, 1.0, None)]] * 3,
        })
        lines = targets(res, ["choir", "openmpi", "mpich"], ["allgather"])
        self.assertEqual(rows_of(lines, "| allgather"), [
            "| allgather ≥ 1.5x at 1 MiB–256 MiB | heap | 1 MiB, 4 MiB, 16 MiB | 1.12x – 1.50x | no: "
            "4 MiB 1.38x, launch by launch 1.10x–1.62x, 1.5x or more in 1 of 3 repeats; "
            "16 MiB 1.12x, launch by launch 0.75x–3.00x, 1.5x or more in 1 of 2 repeats |"])

    def test_a_met_target_has_no_launch_figures(self):
        res = run({
            ("choir", "broadcast"): [[(1 << 20, 3.0, "shm_pipe")]] * 2,
            ("openmpi", "broadcast"): [[(1 << 20, 2.0, None)]] * 2,
        })
        self.assertEqual(rows_of(targets(res, ["choir", "openmpi"], ["broadcast"]), "| broadcast"), [
            "| broadcast ≥ 1.5x at 1 MiB–256 MiB | heap | 1 MiB | 1.50x – 1.50x | yes |"])


class ScalingTarget(unittest.TestCase):
    """choir's N-rank share of its 2-rank allreduce, and the memory ceiling's own share beside it."""

    class Args:
        ranks = 4

    @staticmethod
    def results(with_ceiling):
        res = compare.Results()
        mib = 1 << 20
        # Two repeats; heap: 16 MiB at 60 % and 50 %, 64 MiB at 80 % and 75 %; SharedBuffer: 16 MiB at 55 %.
        for rep, (two16, four16, two64, four64) in enumerate([(10.0, 6.0, 8.0, 6.4), (12.0, 6.0, 8.0, 6.0)]):
            res.add_scaling("choir", 2, rep, [sweep("allreduce", [(16 * mib, two16, None), (64 * mib, two64, None)])])
            res.add_scaling("choir", 4, rep, [sweep("allreduce", [(16 * mib, four16, None), (64 * mib, four64, None)])])
            res.add_scaling("choir-shared", 2, rep, [sweep("allreduce", [(16 * mib, 9.0, None)])])
            res.add_scaling("choir-shared", 4, rep, [sweep("allreduce", [(16 * mib, 4.95, None)])])
            if with_ceiling:
                # The ceiling: 16 MiB at 50 % and 40 %, 64 MiB at 75 % in both; a refused row is skipped.
                res.add_scaling_ceiling(2, rep, [{"results": [
                    {"op": "allreduce", "bytes": 16 * mib, "busbw_gbps": 14.0},
                    {"op": "allreduce", "bytes": 64 * mib, "busbw_gbps": 8.0}]}])
                res.add_scaling_ceiling(4, rep, [{"results": [
                    {"op": "allreduce", "bytes": 16 * mib, "busbw_gbps": 7.0 if rep == 0 else 5.6},
                    {"op": "allreduce", "bytes": 64 * mib, "busbw_gbps": 6.0},
                    {"op": "allreduce", "bytes": 256 * mib, "refused": True}]}])
        return res

    def test_the_ceilings_share_is_tabled_paired_and_named_where_the_target_is_missed(self):
        res = self.results(with_ceiling=True)
        lines, shares = compare.scaling_table(self.Args, res, cpus=2)
        self.assertEqual(shares, {("choir", 16 << 20): 0.55, ("choir", 64 << 20): 0.775,
                                  ("choir-shared", 16 << 20): 0.55})
        self.assertEqual(lines[0], "| buffers | bytes | 2 ranks | 4 ranks | 4 ranks / 2 ranks, paired launches | "
                                   "70% of 2 ranks / 4-process ceiling |")
        # 70 % of choir's 2-rank median (11.0) is 7.7: 122 % of the 4-process ceiling's median (6.3), and
        # above its faster launch (7.0); the SharedBuffer column's 6.3 is 100 %, below that launch.
        self.assertEqual(lines[2], "| heap | 16 MiB | 11 (10–12) | 6 (6–6) | 55% (50%–60%) | 122%, above every launch |")
        self.assertEqual(lines[3], "| heap | 64 MiB | 8 (8–8) | 6.2 (6–6.4) | 78% (75%–80%) | 93% |")
        self.assertEqual(lines[4], "| SharedBuffer | 16 MiB | 9 (9–9) | 4.95 (4.95–4.95) | 55% (55%–55%) | 100% |")
        self.assertIn("| 16 MiB | 14 (14–14) | 6.3 (5.6–7) | 45% (40%–50%) |", lines)
        self.assertIn("| 64 MiB | 8 (8–8) | 6 (6–6) | 75% (75%–75%) |", lines)
        self.assertFalse(any(x.startswith("| 256 MiB") for x in lines))
        # With 4 processes on 2 CPUs the ceiling is called indicative; with 8 CPUs it is not.
        self.assertTrue(lines[-1].endswith("With 4 processes on 2 CPUs the 4-process ceiling is only indicative "
                                           "(the processes take turns on the CPUs)."), lines[-1])
        self.assertNotIn("indicative", compare.scaling_table(self.Args, res, cpus=8)[0][-1])
        rows = rows_of(compare.targets_section(res, {}, ["choir", "choir-shared"], shares, 4, cpus=2), "| 4 ranks")
        self.assertEqual(rows, [
            "| 4 ranks: allreduce busbw ≥ 70% of 2 ranks | heap | 16 MiB, 64 MiB | 55% – 78% | no: 16 MiB asks 122% of "
            "the 4-process memory ceiling, above every launch of it (indicative with more processes than CPUs), and "
            "the ceiling itself scales 45% there |",
            "| 4 ranks: allreduce busbw ≥ 70% of 2 ranks | SharedBuffer | 16 MiB | 55% – 55% | no: 16 MiB asks 100% of "
            "the 4-process memory ceiling, and the ceiling itself scales 45% there |"])
        row = rows_of(compare.targets_section(res, {}, ["choir"], shares, 4, cpus=8), "| 4 ranks")
        self.assertIn("16 MiB asks 122% of the 4-process memory ceiling, above every launch of it, and", row[0])

    def test_without_the_ceiling_the_table_and_the_verdict_are_as_before(self):
        res = self.results(with_ceiling=False)
        lines, shares = compare.scaling_table(self.Args, res, cpus=2)
        self.assertEqual(lines[0], "| buffers | bytes | 2 ranks | 4 ranks | 4 ranks / 2 ranks, paired launches |")
        self.assertEqual(len(lines), 5)
        rows = rows_of(compare.targets_section(res, {}, ["choir"], shares, 4, cpus=2), "| 4 ranks")
        self.assertEqual(rows, ["| 4 ranks: allreduce busbw ≥ 70% of 2 ranks | heap | 16 MiB, 64 MiB | 55% – 78% | no |"])


if __name__ == "__main__":
    unittest.main()
