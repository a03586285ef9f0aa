"""Studies: ``creditgym compare`` (a grid of training runs), its record, statistics, scheduler and Ray jobs."""
