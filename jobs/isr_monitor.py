"""spark-submit entry point of the ISR monitor: the job is
isr/jobs/isr_monitor.py in the package (read its docstring). This script is
also in the wheel: `isr files --out DIR` writes it out.

    spark-submit --master local[2] jobs/isr_monitor.py --config conf/isr.toml
"""

import sys

from isr.jobs.isr_monitor import main

if __name__ == "__main__":
    sys.exit(main())
