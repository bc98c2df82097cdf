"""Tool calls streamed in pieces, assembled once for every stream that needs them.

    calls = ToolCalls()
    for piece in calls.feed(delta.get("tool_calls")):   # OpenAI chunks' fragments
        piece.started, piece.index, piece.name, piece.arguments
    calls.assembled()                                    # [{"id", "type", "function"}, ...]

An upstream sends a call's name and id in its first fragment and its
arguments in later ones, each tagged with the call's ``index``. What the
fragments are is the upstream's word, so they are checked here, in one
place: a fragment that is not an object, an index that is not an integer (a
bool is not), or one outside 0..``MAX_TOOL_CALLS``, and fields of the wrong
type are skipped, never raised. The answer check (``answers.py``), the
Responses stream and the Messages stream all read calls through this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_TOOL_CALLS = 128   # tool-call indexes an answer keeps (upstream-supplied)


@dataclass(slots=True)
class Piece:
    """What one fragment added to one call."""

    index: int                # the call's index, as the upstream numbered it
    started: bool             # this fragment opened the call
    id: str | None            # the call's id, when this fragment carried it
    name: str                 # the name this fragment carried ("" for none)
    arguments: str            # the arguments it added ("" for none)


@dataclass
class ToolCalls:
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)   # index -> the call so far

    def feed(self, fragments: Any) -> list[Piece]:
        """The valid pieces of one delta's ``tool_calls``, added to their calls."""
        pieces = []
        for fragment in fragments if isinstance(fragments, list) else ():
            piece = self._piece(fragment)
            if piece is not None:
                pieces.append(piece)
        return pieces

    def _piece(self, fragment: Any) -> Piece | None:
        if not isinstance(fragment, dict):
            return None
        index = fragment.get("index") or 0
        fn = fragment.get("function") or {}
        if (isinstance(index, bool) or not isinstance(index, int) or not isinstance(fn, dict)
                or not 0 <= index < MAX_TOOL_CALLS):
            return None
        started = index not in self.calls
        call = self.calls.setdefault(index, {"type": "function",
                                             "function": {"name": "", "arguments": ""}})
        call_id = fragment.get("id") if isinstance(fragment.get("id"), str) else None
        if call_id:
            call["id"] = call_id
        name = fn["name"] if isinstance(fn.get("name"), str) else ""
        arguments = fn["arguments"] if isinstance(fn.get("arguments"), str) else ""
        call["function"]["name"] += name
        call["function"]["arguments"] += arguments
        return Piece(index, started, call_id or None, name, arguments)

    def assembled(self) -> list[dict[str, Any]]:
        """The calls so far, as a non-streamed answer carries them, in index order."""
        return [self.calls[i] for i in sorted(self.calls)]
