"""One module per evaluation command: its run config and ``run(config, progress=...)``.

:mod:`personamem.eval.table` lists them; the command line builds each command from its row.
"""
