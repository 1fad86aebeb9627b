// The localsgd worker binary: one process per rank (see worker/worker_app.h and README.md).
#include "worker/worker_app.h"

int main(int argc, char** argv) { return localsgd::RunWorker(argc, argv); }
