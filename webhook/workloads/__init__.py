"""One adapter per job kind: pod sets, priority, quota label and the suspend switch."""
