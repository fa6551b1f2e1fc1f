"""The HTTP side of the process: request logs, log output, drain, readiness, process tuning.

May import: `upstream` (the drain follows WebSocket sessions; readiness asks the upstream's
pool), `audio` (readiness asks whether the local audio roots are still readable), `config`,
`errors`. Nothing in the request pipeline imports it.
"""
