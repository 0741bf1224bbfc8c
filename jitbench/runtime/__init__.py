"""jitbench.runtime."""
