"""The file spark-submit runs (it takes a .py path, not a console script): the
`replaygate` command as a Spark driver, e.g.

    spark-submit --master yarn "$(python -m replaygate.spark.driver --path)" \\
        findings --engine spark --lake s3a://lake/mcp --db fleet.duckdb
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    if sys.argv[1:] == ["--path"]:
        print(__file__)
    else:
        from replaygate.cli import main

        main()
