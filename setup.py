"""Puts the operators' files (isr/ops.py, OPS_FILES: the spark-submit job
script, conf/isr.toml, the Prometheus rules, the Grafana dashboards) into
the wheel as package data under isr/ops/. conf/ and jobs/ stay the one copy
in the repository; `isr files --out DIR` writes them out of an installed wheel."""

import runpy
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
OPS_FILES = runpy.run_path(str(ROOT / "isr" / "ops.py"))["OPS_FILES"]


class BuildWithOpsFiles(build_py):
    def run(self):
        super().run()
        if self.editable_mode:  # an editable install reads conf/ and jobs/ in place
            return
        for source, target in OPS_FILES:
            dest = Path(self.build_lib) / "isr" / "ops" / target
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / source, dest)


setup(cmdclass={"build_py": BuildWithOpsFiles})
