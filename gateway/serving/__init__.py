"""The HTTP side of the process: request logs, log output, drain, readiness, process tuning.

May import: `upstream` (the drain follows WebSocket sessions; readiness asks the upstream's
pool), `config`, `errors`. Nothing in the request pipeline imports it.
"""
