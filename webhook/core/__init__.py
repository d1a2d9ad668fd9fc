"""Pure decision core: no I/O, no clock, no Kubernetes client; standard library only."""
