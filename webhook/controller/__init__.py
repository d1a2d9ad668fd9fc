"""Watches, cache, dequeue loop, status writers and leader election."""
