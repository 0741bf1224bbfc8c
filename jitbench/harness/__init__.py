"""jitbench.harness."""
