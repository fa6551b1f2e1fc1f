"""`[server] workers` > 1: several serving processes on one port, stopped and drained together.

`supervisor` (the process `audio-gateway serve` started) starts the workers, forwards SIGTERM
and SIGINT to them, and starts a worker again when one dies while serving; `worker` is one
serving process (the ordinary app, on the SO_REUSEPORT sockets it inherited); `wire` is what the
two say over the worker's stdin and stdout; `port` makes the port the gateway's own before any
worker starts and binds each worker's sockets; `metrics_dir` is the workers' metrics directory
(and removes those that killed supervisors left).

May import: `app`, `lifecycle`, `config`, `metrics`, `references`, `serving`. Nothing imports
it but `__main__`.
"""
