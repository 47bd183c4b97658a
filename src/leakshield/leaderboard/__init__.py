"""The unified leaderboard (``leakshield leaderboard``): every defense against every attack under one
protocol (``configs/leaderboard.yaml``), ranked by each defense's privacy under the strongest attack run
against it, with the privacy–utility Pareto front."""

from leakshield.leaderboard.ordering import mark_pareto, rank
from leakshield.leaderboard.presets import load_leaderboard
from leakshield.leaderboard.ranking import AttackScore, Standing, standings, strongest
from leakshield.leaderboard.report import LeaderboardFiles, build_leaderboard
from leakshield.leaderboard.threats import threat_of

__all__ = [
    "AttackScore",
    "LeaderboardFiles",
    "Standing",
    "build_leaderboard",
    "load_leaderboard",
    "mark_pareto",
    "rank",
    "standings",
    "strongest",
    "threat_of",
]
