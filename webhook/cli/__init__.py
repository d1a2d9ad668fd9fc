"""The kq command."""
