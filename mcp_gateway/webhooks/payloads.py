"""What a webhook delivery says, in the subscription's format
(docs/mcp-interface.md, "Approvers are told").

``standard``: ``{type, timestamp, data: {approval_id, workspace, agent, tool,
version, status, decided_by, note, arguments, approval_url, api_url}}``:
``approval_url`` is the approval on the approver inbox page (a person opens it),
``api_url`` its record on the approval-key endpoints (a program reads it).
``slack``: a Slack-compatible message, ``{text, blocks}``, naming the tool, its
arguments (in a code block no argument can close), the agent that asked and a link to the approval in the inbox. Either way every string of
the event (arguments, the approver's note) is masked with the workspace's
secrets first (shared.engine.masking), so no secret value leaves in a payload;
a payload never carries a secret of its own either (the signing secret only
signs).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import msgspec

from shared.engine.masking import Masker
from shared.public_urls import approvals_path

SLACK_ARGUMENTS_CHARS = 2800  # a Slack section's text holds at most 3000 characters

_encoder = msgspec.json.Encoder(order="sorted")

_HEADLINES = {
    "approval.created": "asks for approval",
    "approval.decided": "was decided",
    "approval.completed": "completed",
    "approval.failed": "failed",
    "approval.expired": "expired unanswered",
}


class ApprovalLinks(NamedTuple):
    page: str  # the approval in the approver inbox: .../approvals/inbox#approval_...
    api: str  # its record: the approval_url that approval_required answers


def approval_links(public_url: str, prefix: str, event: dict[str, Any]) -> ApprovalLinks:
    """The approval's URLs on the gateway: absolute behind ``CRANK_PUBLIC_URL``, else
    server paths."""
    base = public_url.rstrip("/") + approvals_path(prefix, event["workspace"], event["agent"])
    approval_id = event["approval_id"]
    return ApprovalLinks(page=f"{base}/inbox#{approval_id}", api=f"{base}/{approval_id}")


def event_data(event: dict[str, Any], masker: Masker, links: ApprovalLinks) -> dict[str, Any]:
    """The ``data`` object of one event, masked."""
    data = {
        "approval_id": event["approval_id"],
        "workspace": event["workspace"],
        "agent": event["agent"],
        "tool": event["tool"],
        "version": event["version"],
        "status": event["status"],
        "decided_by": event.get("decided_by"),
        "note": event.get("note"),
        "arguments": event.get("arguments", {}),
        "approval_url": links.page,
        "api_url": links.api,
    }
    masked: dict[str, Any] = masker.value(data)
    return masked


def render(
    kind: str, event_type: str, event: dict[str, Any], masker: Masker, links: ApprovalLinks
) -> bytes:
    """The body of a delivery of ``event_type`` in format ``kind``."""
    data = event_data(event, masker, links)
    if kind == "slack":
        return _encoder.encode(slack_message(event_type, data))
    return _encoder.encode({"type": event_type, "timestamp": event["timestamp"], "data": data})


_BACKTICK_PAIR = re.compile("`(?=`)")
_ZERO_WIDTH_SPACE = "\u200b"
_PARTIAL_ENTITY = re.compile("&[a-z]{0,3}$")  # the start of &amp; &lt; &gt; left by a cut


def _escaped(text: str) -> str:
    """Slack's mrkdwn control characters, escaped as Slack asks."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _in_code_block(text: str) -> str:
    """``text`` escaped for a ```` ``` ```` block: mrkdwn has no escape for a backtick, so
    a zero-width space parts every two adjacent ones; no run of three can close the block."""
    return _BACKTICK_PAIR.sub("`" + _ZERO_WIDTH_SPACE, _escaped(text))


def slack_message(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    headline = _HEADLINES.get(event_type, event_type)
    tool = _escaped(f"{data['tool']} v{data['version']}")
    asker = _escaped(f"{data['workspace']}/{data['agent']}")
    text = f"Crank: {tool} {headline} (agent {asker}, status {data['status']})"
    formatted = msgspec.json.format(_encoder.encode(data["arguments"]), indent=2).decode()
    # Cut after escaping, which may lengthen the text (an "&" is five characters),
    # and never inside an entity.
    arguments = _in_code_block(formatted)
    if len(arguments) > SLACK_ARGUMENTS_CHARS:
        arguments = _PARTIAL_ENTITY.sub("", arguments[: SLACK_ARGUMENTS_CHARS - 1]) + "…"
    url = str(data["approval_url"])
    link = f"<{url}|{_escaped(str(data['approval_id']))}>" if "://" in url else _escaped(url)
    details = [f"*Agent:* {asker}", f"*Status:* {_escaped(str(data['status']))}"]
    if data.get("decided_by"):
        details.append(f"*Decided by:* {_escaped(str(data['decided_by']))}…")
    if data.get("note"):
        details.append(f"*Note:* {_escaped(str(data['note']))}")
    details.append(f"*Approval:* {link}")
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{tool}* {headline}"}},
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"```{arguments}```"},
            },
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(details)}},
        ],
    }
