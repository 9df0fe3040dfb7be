"""The leaderboard site: stores what langbite_core produces and publishes it."""
