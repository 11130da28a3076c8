// Every grade binary's main(): see worker.h.
#include "worker.h"

int main(int argc, char** argv) { return labkit::grade::main(argc, argv); }
