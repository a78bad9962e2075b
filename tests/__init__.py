"""The test tree mirrors the product; packages keep same-named modules in different folders apart."""
