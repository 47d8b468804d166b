"""Tests of the deploy/ tools."""
