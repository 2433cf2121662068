"""examples/train_llama.py on the CPU: the tiny model, 4 steps, bf16 and
MOSS runs, in this process. Checks the JSON report (both runs, finite
losses, the same step-0 loss within FP8's error), the SVG plot (it parses,
one polyline per run) and the refusal of the 1b model on the CPU. Skips
without torch."""

import io
import json
import math
import os
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from contextlib import redirect_stderr, redirect_stdout

from support import have_torch

if not have_torch():
    raise unittest.SkipTest("torch is not installed (train_llama.py needs "
                            "it)")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "examples"))
import moss_jit  # noqa: E402
import train_llama  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"


class TrainLlamaCpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # A small corpus and few evaluation batches keep the run short;
        # the MOSS GEMMs run the host reference on the CPU.
        args = ["--size", "tiny", "--steps", "4", "--runs", "bf16", "moss",
                "--device", "cpu", "--corpus-bytes", str(2 << 20),
                "--eval-batches", "2", "--log-every", "1",
                "--out-dir", cls.tmp.name]
        cls.stdout = io.StringIO()
        with redirect_stdout(cls.stdout):
            train_llama.main(args)
        with open(os.path.join(cls.tmp.name, "results.json")) as f:
            cls.report = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_report_has_both_runs_with_finite_losses(self):
        runs = self.report["runs"]
        self.assertEqual(sorted(runs), ["bf16", "moss"])
        for label, run in runs.items():
            with self.subTest(run=label):
                self.assertNotIn("error", run)
                self.assertEqual(len(run["losses"]), 4)
                for value in run["losses"] + [run["final_train_loss"],
                                              run["held_out_loss"]]:
                    self.assertIsNotNone(value)
                    self.assertTrue(math.isfinite(value))
                self.assertEqual(run["nonfinite_steps"], 0)
                self.assertGreater(run["tokens_per_s"], 0)
                self.assertGreater(run["first_step_s"], 0)
                self.assertIsNone(run["peak_memory_bytes"])
        self.assertEqual(runs["bf16"]["tokens_per_s_vs_bf16"], 1.0)
        self.assertEqual(self.report["config"]["kept_in_bf16"],
                         ["tok_embeddings", "lm_head"])

    def test_both_runs_start_from_the_same_loss(self):
        # The same weights and the same first batch: the loss of a uniform
        # guess over 256 bytes, which MOSS's FP8 products move only a little.
        bf16 = self.report["runs"]["bf16"]["losses"][0]
        moss = self.report["runs"]["moss"]["losses"][0]
        self.assertAlmostEqual(bf16, math.log(256), delta=0.2)
        self.assertLess(abs(moss - bf16), 0.05 * bf16)

    def test_the_plot_has_one_polyline_per_run(self):
        root = ET.parse(os.path.join(self.tmp.name, "loss.svg")).getroot()
        self.assertEqual(root.tag, SVG + "svg")
        lines = root.findall(f".//{SVG}polyline")
        self.assertEqual(sorted(p.find(SVG + "title").text for p in lines),
                         ["bf16", "moss"])
        for line in lines:
            self.assertEqual(len(line.get("points").split()), 4)

    def test_progress_and_table_are_printed(self):
        text = self.stdout.getvalue()
        self.assertIn("moss step     3", text)
        held_out = self.report["runs"]["moss"]["held_out_loss"]
        self.assertIn("moss done: ", text)
        self.assertIn(f"held-out loss {held_out:.4f}, 0 bad steps", text)
        self.assertIn("tokens/s", text)
        self.assertRegex(text, r"\nmoss +[\d,]+ +[\d.]+ +n/a ")
        self.assertRegex(text, r"first step s\n")
        first = self.report["runs"]["moss"]["first_step_s"]
        self.assertRegex(text, rf"\nmoss .* 0 +{first:.2f}\n")

    def test_each_moss_run_converts_with_its_options(self):
        expected = {"moss": ("e4m3", "row", 128, 0),
                    "moss-e5m2": ("e5m2", "row", 128, 0),
                    "moss-fast-wgrad": ("e4m3", "row", 0, 0),
                    "moss-promoted": ("e4m3", "row", 128, 128),
                    "moss-exact": ("e4m3", "none", 0, 0)}
        for run, options in expected.items():
            with self.subTest(run=run):
                model = train_llama.build_model("tiny", seed=0)
                train_llama.convert_for_run(model, run)
                configs = [m.config for m in model.modules()
                           if isinstance(m, moss_jit.nn.Linear)]
                self.assertEqual(len(configs), 2 * 7)
                for c in configs:
                    self.assertEqual((c.grad_format, c.fold,
                                      c.wgrad_promote_k, c.dgrad_promote_k),
                                     options)

    def test_the_learning_rate_warms_up_over_at_least_10_steps(self):
        for steps, warmup in ((4, 4), (30, 10), (1000, 50), (5000, 100)):
            args = train_llama.parse_args(["--size", "tiny", "--device",
                                           "cpu", "--steps", str(steps)])
            self.assertEqual(args.lr_warmup, warmup, f"{steps} steps")

    def test_the_1b_model_is_refused_on_the_cpu(self):
        stderr = io.StringIO()
        with self.assertRaises(SystemExit), redirect_stderr(stderr):
            train_llama.parse_args(["--size", "1b", "--device", "cpu"])
        self.assertIn("--size 1b needs a GPU", stderr.getvalue())


if __name__ == "__main__":
    unittest.main()
