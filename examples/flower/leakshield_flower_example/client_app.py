"""The ClientApps: leakshield's honest client, the config's update-stage defenses as Flower mods (``app``);
or every defense in process and the reply masked by Flower's SecAgg+ mod (``secagg_app``)."""

from pathlib import Path

from leakshield.flower import client_app, secure_client_app

app = client_app(base=Path(__file__).parent)
secagg_app = secure_client_app(base=Path(__file__).parent)
