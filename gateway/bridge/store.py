"""The bridge stores nothing: what that means for the routes that look a response up. Pure.

A bridged answer exists only in the reply that carried it (its `store` is false, whatever the
request said). Its id says where it came from (`resp_bridge_<hex>`), so the routes that name a
stored response (`GET`/`DELETE /v1/responses/{id}`, `.../cancel`, `.../input_items`) answer a
clear 404 for it instead of passing it to the upstream, which never saw it, and a Responses
request naming one as its `previous_response_id` is a 400 naming that field, even one without
audio that would go to the upstream's own route (a bridged request is refused any
`previous_response_id` by `request.py`). Any other id is the upstream's own and goes to it
untouched.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequest, ResponseNotStored

BRIDGED_ID_PREFIX = "resp_bridge_"


def is_bridged_id(response_id: str) -> bool:
    return response_id.startswith(BRIDGED_ID_PREFIX)


def _not_stored(response_id: str) -> str:
    return (
        f"{response_id} was answered by the gateway's audio bridge (responses.audio = "
        f"'chat_bridge'), which stores nothing: every bridged answer says \"store\": false. "
        f"Send the conversation so far as `input` instead (input += response.output)"
    )


def refuse_lookup(response_id: str) -> None:
    """404 `response_not_stored` for the id of a bridged answer; nothing for any other id."""
    if is_bridged_id(response_id):
        raise ResponseNotStored(
            _not_stored(response_id), param="response_id", code="response_not_stored"
        )


def refuse_bridged_previous(body: dict[str, Any]) -> None:
    """400 `response_not_stored` naming `previous_response_id` when it is a bridged id."""
    previous = body.get("previous_response_id")
    if isinstance(previous, str) and is_bridged_id(previous):
        raise InvalidRequest(
            _not_stored(previous), param="previous_response_id", code="response_not_stored"
        )
