"""The ClientApp: leakshield's honest client; the config's update-stage defenses run as Flower mods."""

from pathlib import Path

from leakshield.flower import client_app

app = client_app(base=Path(__file__).parent)
