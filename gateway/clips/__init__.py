"""One loaded clip and what is told about it.

`loaded` is a clip as a request holds it once read (a file, an object or inline audio): its
names, header, base64, uuid and digest in the clip key. `inline` finds the audio a client
inlined itself that goes by reference as a clip the gateway holds. `over_window` counts and
logs, with `[chunking]` off, the clips longer than the model's window.

May import: `affinity`, `audio`, `naming`, `references` (a held clip's uuid), `splice`,
`upstream` (body segments), `metrics`. The request path (`request`), `chunking` and the bench
import it, never the other way.
"""
