"""The CTR recommender: click-log generator, feature building, ranking and session state."""
