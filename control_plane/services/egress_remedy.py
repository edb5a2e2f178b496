# ruff: noqa: RUF001 - the Russian texts are Cyrillic on purpose
"""What an admin changes so that a refused upstream may be called: the remedy of an
``upstream_blocked`` tool error, for try-it (API and console), never for a model.

The gateway's tool error stays generic ("the administrator must allow this
upstream"): a model is not told how Crank is configured. An admin trying an
operation is told the layer that refused (docs/architecture.md, "Egress per
workspace") and the exact entry to add, read from the error's ``blocked`` details
(shared.engine.egress.Blocked):

- ``workspace_hosts``: an owner adds the host to the workspace's host list;
- ``workspace_grants``: an instance admin grants ``host:port`` to the workspace;
- ``operator``: the operator adds ``host:port`` to ``CRANK_UPSTREAM_ALLOWLIST``
  (a restart), then an instance admin grants it;
- ``metadata``: nothing can allow it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any, Final

from shared.engine.errors import Language

_TEXTS: Final[Mapping[str, Mapping[Language, str]]] = {
    "workspace_hosts": {
        "en": (
            "{host} is not on this workspace's host list. A workspace owner adds {host} "
            "under Hosts on the Egress page ({page})."
        ),
        "ru": (
            "{host} нет в списке хостов этого пространства. Владелец пространства "
            "добавляет {host} в разделе «Hosts» на странице Egress ({page})."
        ),
    },
    "workspace_grants": {
        "en": (
            "{address} is a private address ({category}) the operator allows, but this "
            "workspace has no grant for it. An instance admin adds the grant {entry} under "
            "Grants on the Egress page ({page})."
        ),
        "ru": (
            "{address} — частный адрес ({category}), который оператор разрешает, но у "
            "этого пространства нет разрешения на него. Администратор экземпляра добавляет "
            "разрешение {entry} в разделе «Grants» на странице Egress ({page})."
        ),
    },
    "operator": {
        "en": (
            "{address} is a private address ({category}) that the operator's "
            "CRANK_UPSTREAM_ALLOWLIST does not include. The operator adds {entry} to "
            "CRANK_UPSTREAM_ALLOWLIST and restarts Crank; then an instance admin adds the "
            "grant {entry} on the Egress page ({page})."
        ),
        "ru": (
            "{address} — частный адрес ({category}), которого нет в "
            "CRANK_UPSTREAM_ALLOWLIST оператора. Оператор добавляет {entry} в "
            "CRANK_UPSTREAM_ALLOWLIST и перезапускает Crank; затем администратор "
            "экземпляра добавляет разрешение {entry} на странице Egress ({page})."
        ),
    },
    "operator_loopback": {
        "en": (
            " On a developer's machine, CRANK_ALLOW_LOOPBACK_UPSTREAMS=true opens loopback "
            "to every workspace instead; `crank up` on loopback sets it."
        ),
        "ru": (
            " На машине разработчика вместо этого CRANK_ALLOW_LOOPBACK_UPSTREAMS=true "
            "открывает loopback всем пространствам; `crank up` на loopback задаёт его."
        ),
    },
    "metadata": {
        "en": (
            "{host} is a cloud metadata address: Crank never calls it, whatever the "
            "settings. Use another address for this API."
        ),
        "ru": (
            "{host} — адрес метаданных облака: Crank никогда его не вызывает, при любых "
            "настройках. Используйте другой адрес этого API."
        ),
    },
}


_LAYERS: Final = frozenset({"workspace_hosts", "workspace_grants", "operator", "metadata"})


def egress_page(workspace: str) -> str:
    """The console page where a workspace's hosts and grants are changed."""
    return f"/ui/w/{workspace}/egress"


def allow_entry(host: str, port: int) -> str:
    """``host:port`` as a grant and ``CRANK_UPSTREAM_ALLOWLIST`` entry (IPv6 bracketed)."""
    try:
        bracketed = ipaddress.ip_address(host).version == 6
    except ValueError:
        bracketed = False
    return f"[{host}]:{port}" if bracketed else f"{host}:{port}"


def egress_remedy(details: Mapping[str, Any], workspace: str, language: Language) -> str | None:
    """What to change, from a tool error's ``details``; None when the error is not a
    refusal by a policy layer (another error, or a URL Crank cannot call at all)."""
    blocked = details.get("blocked")
    if not isinstance(blocked, Mapping) or blocked.get("by") not in _LAYERS:
        return None
    host, port = str(blocked["host"]), int(blocked["port"])
    category = str(blocked.get("category") or "private")
    text = _TEXTS[blocked["by"]][language]
    if blocked["by"] == "operator" and category == "loopback":
        text += _TEXTS["operator_loopback"][language]
    entry = allow_entry(host, port)
    return text.format(
        host=host,
        address=entry,
        entry=entry,
        category=category.replace("_", " "),
        page=egress_page(workspace),
    )


__all__ = ["allow_entry", "egress_page", "egress_remedy"]
