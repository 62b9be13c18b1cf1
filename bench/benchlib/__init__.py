"""Code shared by the bench scripts (bench/run, bench/serve, ...): paths, process measurement,
statistics, the machine's description.  Standard library only.  The scripts live next to this
package, so `import benchlib` finds it (the script's directory is first on sys.path)."""
