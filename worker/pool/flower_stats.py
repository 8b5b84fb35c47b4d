"""A pool worker's tiers as Flower shows them: worker/app.py's ``PoolStats`` bootstep puts this view in Celery's
``inspect stats`` reply, which Flower's worker page lists under "Other" (any key it does not know)."""

from __future__ import annotations

from worker.pool.tiers import Pool, Tier

MB = 1e6


def tier_view(pool: Pool) -> dict[str, str]:
    """One line per tier: its models (pinned marked, "loading" for a move onto the device under way) and its bytes
    held against its budget."""
    by_tier: dict[str, list[str]] = {t.value: [] for t in Tier}
    by_tier["loading"] = []
    for name, tier in sorted(pool.tiers().items()):
        by_tier[tier].append(name + (" (pinned)" if pool.holdings[name].pinned else ""))
    budgets = {Tier.device: pool.device_budget, Tier.host: pool.host_budget}
    view = {}
    for tier, models in by_tier.items():
        line = ", ".join(models) or "-"
        if tier in budgets:
            line += f" ({pool.held(Tier(tier)) / MB:.1f} of {budgets[Tier(tier)] / MB:.1f} MB)"
        view[f"genq pool {tier}"] = line
    return view
