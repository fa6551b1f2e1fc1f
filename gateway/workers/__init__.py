"""`[server] workers` > 1: several serving processes on one port, stopped and drained together.

`supervisor` (the process `audio-gateway serve` started) checks the port, starts the workers,
forwards SIGTERM and SIGINT to them, and starts a worker again when one dies while serving;
`worker` is one serving process (the ordinary app, listening with SO_REUSEPORT); `wire` is what
the two say over the worker's stdin and stdout; `port` checks the port before any worker starts.

May import: `app`, `lifecycle`, `config`, `metrics`, `references`, `serving`. Nothing imports
it but `__main__`.
"""
