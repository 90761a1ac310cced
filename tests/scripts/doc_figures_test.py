"""Tests of scripts/doc-figures: a figure typed over its generated value, a figure whose
report is missing and an unknown figure name all fail the check; a current block passes, and
the script rewrites a stale one. Usage: python3 tests/scripts/doc_figures_test.py"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "doc-figures")

REPORT = [
    {
        "scenario": "produce",
        "figures": [{"name": "acknowledged", "value": 153.67, "unit": "MB/s"}],
        "ratios": [{"name": "acknowledged vs raw PUT", "ours": 153.67, "baseline": 174.93, "ratio": 0.8785, "unit": "MB/s"}],
        "latencies": [{"name": "append acknowledgement", "summary": {"count": 9, "mean_ms": 1, "p50_ms": 419.4, "p90_ms": 500, "p99_ms": 746.6, "p999_ms": 800, "max_ms": 900}}],
        "targets": [{"name": "acknowledged MB/s ≥ 0.8 × raw PUT MB/s", "measured": 0.8785, "limit": 0.8, "met": True, "margin": "+10%"}],
    }
]


def doc(generated, alias="R=run1"):
    return (
        "# Figures\n\n"
        f"<!-- figures: {alias}\n"
        "| figure | value |\n|---|---:|\n"
        "| acknowledged | {{R.produce.fig('acknowledged')|.0f}} MB/s |\n"
        "| ÷ raw PUT | {{R.produce.ratio('acknowledged vs').ratio|.2f}} ({{met(R.produce.target('acknowledged'))}}) |\n"
        "| ack p99 | {{R.produce.lat('append').p99|.0f}} ms |\n"
        "-->\n" + generated + "<!-- /figures -->\nAfter.\n"
    )


CURRENT = "| figure | value |\n|---|---:|\n| acknowledged | 154 MB/s |\n| ÷ raw PUT | 0.88 (met) |\n| ack p99 | 747 ms |\n"


class DocFigures(unittest.TestCase):
    def tree(self, text, report=True):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        root = tmp.name
        os.makedirs(os.path.join(root, "docs", "performance", "run1"))
        if report:
            with open(os.path.join(root, "docs", "performance", "run1", "report.json"), "w") as f:
                json.dump(REPORT, f)
        with open(os.path.join(root, "docs", "perf.md"), "w") as f:
            f.write(text)
        return root

    def run_script(self, root, *args):
        return subprocess.run([sys.executable, SCRIPT, *args, "--root", root, "docs/perf.md"], capture_output=True, text=True)

    def test_a_current_block_passes(self):
        out = self.run_script(self.tree(doc(CURRENT)), "--check")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_a_typed_number_that_drifted_fails_and_is_rewritten(self):
        root = self.tree(doc(CURRENT.replace("154 MB/s", "160 MB/s")))
        out = self.run_script(root, "--check")
        self.assertEqual(out.returncode, 1)
        self.assertIn("-| acknowledged | 160 MB/s |", out.stdout)
        self.assertIn("+| acknowledged | 154 MB/s |", out.stdout)
        self.assertEqual(self.run_script(root).returncode, 0)
        with open(os.path.join(root, "docs", "perf.md")) as f:
            self.assertEqual(f.read(), doc(CURRENT))
        self.assertEqual(self.run_script(root, "--check").returncode, 0)

    def test_a_figure_without_its_report_fails(self):
        out = self.run_script(self.tree(doc(CURRENT), report=False), "--check")
        self.assertEqual(out.returncode, 1)
        self.assertIn("docs/performance/run1: no report.json", out.stderr)

    def test_an_unknown_figure_fails_naming_what_there_is(self):
        out = self.run_script(self.tree(doc(CURRENT).replace("fig('acknowledged')", "fig('delivered')")), "--check")
        self.assertEqual(out.returncode, 1)
        self.assertIn("no figure 'delivered'; there are: ['acknowledged']", out.stderr)


class LincheckReports(unittest.TestCase):
    def test_a_checker_report_gives_totals_faults_and_mutants(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        root = tmp.name
        os.makedirs(os.path.join(root, "docs", "reliability", "run"))
        report = {
            "histories": {"/x/history.jsonl": {
                "logs": [{"log": "s/0", "ops": 10, "appends_ok": 6}, {"log": "s/1", "ops": 12, "appends_ok": 7}],
                "faults": {"kill -9 oxia leader": 3}, "ops": 22, "violations": 0, "undecided": 0}},
            "mutants": [{"kind": "lost", "caught": True}, {"kind": "reorder", "caught": False}],
            "ok": False,
        }
        with open(os.path.join(root, "docs", "reliability", "run", "lincheck.json"), "w") as f:
            json.dump(report, f)
        template = (
            "<!-- figures: H=../reliability/run\n"
            "{{H.history.fig('ops')}} ops, {{H.history.fig('appends_ok')}} acked on {{H.history.fig('logs')}} logs, "
            "{{H.history.fig('fault: kill')}} kills, lost {{H.history.fig('caught: lost')}}, reorder {{H.history.fig('caught: reorder')}}\n"
            "-->\n<!-- /figures -->\n"
        )
        with open(os.path.join(root, "docs", "rel.md"), "w") as f:
            f.write(template)
        out = subprocess.run([sys.executable, SCRIPT, "--root", root, "docs/rel.md"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        with open(os.path.join(root, "docs", "rel.md")) as f:
            self.assertIn("22 ops, 13 acked on 2 logs, 3 kills, lost 1, reorder 0", f.read())


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print(f"doc_figures_test: {result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
