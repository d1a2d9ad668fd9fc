"""Virtual-clock simulator over the decision core."""
