"""Helpers shared by test modules (stubs, mocks, harnesses); test modules import only from here, never from each other."""
