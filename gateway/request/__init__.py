"""One rewritten request, from the client's body to the body that goes upstream.

`pipeline` is the orchestrator: parse -> sidechannel and path parts -> clips -> splice -> body.
Beside it: `shapes` (how each route takes its audio, and the JSON-object parse), `loading` (a
request's clips: paths checked by kind, [normalize], cache), `parts` (one clip as the audio part
the route takes), `long_audio` (a long clip split into one body per piece, [chunking]), `build`
(the pipeline of a config); `speech` builds the speech-to-text routes' multipart upload from
the same clips.

May import: every room below the top (`naming`, `audio`, `clips`, `normalize`, `chunking`,
`references`, `affinity`, `splice`, `upstream`, the ground). The top (`app`) and the dataset
tools (`tools`) import it.
"""
