"""Ad-click prediction: 10 impression features in, a click probability out (LightGBM)."""
