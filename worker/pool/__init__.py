"""A worker serving many models: tiers (device, host RAM, disk), moves off the model thread, turns across models."""
