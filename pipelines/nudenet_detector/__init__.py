"""NudeNet 3.4.2 content-moderation detector (YOLOv8n, 320x320) as a Triton pipeline."""
