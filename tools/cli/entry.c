/* The process entry point, kept apart from main.c so that the argument fuzzer
 * (tests/fuzz/fuzz_args.c) can link the whole command line without a second main(). */
#include "cli.h"

int main(int argc, char **argv) { return cli_main(argc, argv); }
