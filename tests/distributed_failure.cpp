// Run by ctest under `mpirun -np 2` with a mode: rank 1 stops taking part and rank 0 calls an
// allreduce. "hang": rank 1 sleeps; rank 0's collective times out after
// KTAPE_DISTRIBUTED_TIMEOUT seconds and aborts the job with its message. "exit": rank 1 exits
// with status 3; mpirun ends the job and says so. Either way the job ends, it does not hang.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "distributed/distributed.hpp"
#include "ktape/ktape.hpp"

int main(int argc, char** argv) {
  namespace D = ktape::distributed;
  const std::string mode = argc > 1 ? argv[1] : "";
  D::init();
  if (D::rank() == 1) {
    if (mode == "exit") std::_Exit(3);
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  (void)D::allreduce(ktape::NDArray::full(ktape::Shape{4}, 1.0));
  std::printf("rank 0: the allreduce returned\n");
  D::finalize();
  return 0;
}
