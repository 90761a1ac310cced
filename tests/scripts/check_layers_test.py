"""Tests of scripts/check-layers: the workspace's graph passes, and a front end depending on a
role crate, a normal dependency enabling the service's testkit, and a role crate depending on
the service each fail, naming the crate. Usage: python3 tests/scripts/check_layers_test.py"""

import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "check-layers")


def metadata():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)


def package(meta, name):
    return next(p for p in meta["packages"] if p["name"] == name)


def dependency(name, features=()):
    return {"name": name, "kind": None, "features": list(features), "optional": False}


def run(meta):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(meta, f)
    try:
        return subprocess.run([sys.executable, SCRIPT, f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)


class CheckLayers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.meta = metadata()

    def test_the_workspace_keeps_its_layers(self):
        result = run(self.meta)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_a_front_end_on_a_role_crate_fails(self):
        meta = copy.deepcopy(self.meta)
        package(meta, "lakestream-kafka")["dependencies"].append(dependency("lakestream-writer"))
        result = run(meta)
        self.assertEqual(result.returncode, 1)
        self.assertIn("lakestream-kafka depends on lakestream-writer", result.stderr)

    def test_a_dev_dependency_on_a_role_crate_passes(self):
        meta = copy.deepcopy(self.meta)
        dep = dependency("lakestream-meta")
        dep["kind"] = "dev"
        package(meta, "lakestream-server")["dependencies"].append(dep)
        self.assertEqual(run(meta).returncode, 0)

    def test_testkit_in_a_normal_dependency_fails(self):
        meta = copy.deepcopy(self.meta)
        deps = package(meta, "lakestream-server")["dependencies"]
        service = next(d for d in deps if d["name"] == "lakestream-service" and d["kind"] is None)
        service["features"].append("testkit")
        result = run(meta)
        self.assertEqual(result.returncode, 1)
        self.assertIn("lakestream-server enables lakestream-service/testkit", result.stderr)

    def test_a_role_crate_on_the_service_fails(self):
        meta = copy.deepcopy(self.meta)
        package(meta, "lakestream-reader")["dependencies"].append(dependency("lakestream-service"))
        result = run(meta)
        self.assertEqual(result.returncode, 1)
        self.assertIn("lakestream-reader depends on lakestream-service", result.stderr)


if __name__ == "__main__":
    unittest.main()
