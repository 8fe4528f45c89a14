"""Labels the worker puts on the sandboxes it creates, beyond the backend's own."""

from __future__ import annotations

import hashlib

from mosoo_core.settings import get_settings

LABEL_INSTALLATION = "mosoo.installation"
# On Pet sandboxes: what they were built from (agents.sandbox_fingerprint).
LABEL_BUILT_FROM = "mosoo.built_from"
# On sandboxes that mount an environment layer: which one ("<hash>/<attempt>"), so the
# layer's collection can see it is in use; on build sandboxes: the packages hash they build.
LABEL_ENV_LAYER = "mosoo.env_layer"
LABEL_BUILD = "mosoo.build"
# On run sandboxes: the skill versions they mount ("<version id>,..."; "" for none), so a Pet
# run lists what its sandbox has and the collection of extracted skills sees what is in use.
LABEL_SKILLS = "mosoo.skills"


def installation_label() -> dict[str, str]:
    """Sandboxes are labelled with the database they belong to, so installations (or test
    runs) sharing one Docker engine never sweep each other's sandboxes."""
    digest = hashlib.sha256(get_settings().resolved_database_url.encode()).hexdigest()[:16]
    return {LABEL_INSTALLATION: digest}
