"""The per-volume worker: runs the storage core over one volume's data directories.

What belongs here: the daemon's scheduling (retention, cleaner threads, flushes, checkpoints,
delayed deletes, reloads of the topic set and settings), the control surface (annotations and
the admin HTTP API), status and Prometheus metrics, structured logs, and ``logkeeper serve``'s
run loop. Public entry points: :class:`~storageworker.worker.Worker` and
:func:`~storageworker.serve.serve`.

What must not: storage algorithms (those are storagecore's), anything that talks to the
Kubernetes API (the operator renders the topic set into a mounted file; the worker only reads
files), or imports of the operator or the Spark pipeline (import-linter enforces the direction).
Decisions are pure functions (settings → windows, manifests → topic set and controls, worker
state → status document and metrics) tested without I/O; the thin edges call them.
"""
