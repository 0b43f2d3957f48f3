"""Offline tools over log dirs, for people: ``dump`` (kafka-dump-log's output) and ``verify``
(consistency of a log dir). They read through :mod:`storagecore.log_dir_view` and never write;
nothing else in storagecore imports them (the ``logkeeper`` CLI does).
"""
