# ruff: noqa: RUF001 - the Russian texts are Cyrillic on purpose
"""What an admin changes so that a refused upstream may be called: the remedy of an
``upstream_blocked`` tool error, for try-it (API and console), never for a model.

The gateway's tool error stays generic ("the administrator must allow this
upstream"): a model is not told how Crank is configured. An admin trying an
operation is told the layer that refused (docs/architecture.md, "Egress per
workspace", shared.engine.egress.Blocked) and the exact entry to add:

- ``workspace_hosts``: an owner adds the host to the workspace's host list;
- ``workspace_grants``: an instance admin grants ``host:port`` to the workspace;
- ``operator``: the operator adds ``host:port`` to ``CRANK_UPSTREAM_ALLOWLIST``
  (a restart), then an instance admin grants it;
- ``metadata``: nothing can allow it.

Whether the operator allowlisted an address is the instance's configuration, and
may be there for another tenant: only instance admins are told which of the last
two refused; anyone else is told both steps an instance admin takes.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Final

from shared.engine.egress import Blocked
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
    "private": {
        "en": (
            "{address} is a private address ({category}). This workspace reaches it only "
            "once an instance admin grants {entry} on the Egress page ({page}) and the "
            "operator's CRANK_UPSTREAM_ALLOWLIST includes it: ask an instance admin."
        ),
        "ru": (
            "{address} — частный адрес ({category}). Это пространство достигнет его, "
            "только когда администратор экземпляра выдаст разрешение {entry} на странице "
            "Egress ({page}) и CRANK_UPSTREAM_ALLOWLIST оператора будет его включать: "
            "обратитесь к администратору экземпляра."
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


def egress_remedy(
    blocked: Blocked | None, workspace: str, language: Language, *, instance_admin: bool
) -> str | None:
    """What to change; None when no policy layer refused (another error, or a URL
    Crank cannot call at all)."""
    if blocked is None:
        return None
    layer: str = blocked.by
    if layer in ("workspace_grants", "operator") and not instance_admin:
        layer = "private"
    category = blocked.category or "private"
    text = _TEXTS[layer][language]
    if layer == "operator" and category == "loopback":
        text += _TEXTS["operator_loopback"][language]
    entry = allow_entry(blocked.host, blocked.port)
    return text.format(
        host=blocked.host,
        address=entry,
        entry=entry,
        category=category.replace("_", " "),
        page=egress_page(workspace),
    )


__all__ = ["allow_entry", "egress_page", "egress_remedy"]
