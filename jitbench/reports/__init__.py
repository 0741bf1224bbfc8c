"""jitbench.reports."""
