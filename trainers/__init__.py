"""Offline trainers, imported as ``personamem.trainers``: one folder each with a ``run(config)``.

:data:`personamem.trainers.table.TRAINERS` lists them (``personamem train`` is built from it); the
loop PURPLE and PG-Ret share is :mod:`personamem.trainers.loop`. Data comes from
:mod:`personamem.datasets`; the evaluation harness is used for its metrics only.
"""
