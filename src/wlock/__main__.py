from wlock.cli import main

# Guarded: a worker process of multiprocessing may import this module again (as
# `__mp_main__`), and must not run the command line a second time.
if __name__ == "__main__":
    main()
