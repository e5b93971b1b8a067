/*
 * The MPI backend of the communicator interface (engine/comm.h): host buffers, one MPI_Comm per
 * group. Kept apart from comm.h so that only code that creates the root group needs <mpi.h>.
 */
#ifndef MOE_ENGINE_COMM_MPI_H
#define MOE_ENGINE_COMM_MPI_H

#include "engine/comm.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The MPI backend table (always built). */
const struct moe_comm_backend *moe_comm_mpi_backend(void);

/*
 * Make the root group from an MPI communicator: the engine's "world" (MPI_COMM_WORLD in the
 * trainer, a sub-communicator in tests). The communicator is duplicated, so the caller keeps its
 * own. MPI must be initialised. MOE_ERR_NOMEM on allocation failure.
 */
MOE_NODISCARD enum moe_status
moe_comm_mpi_create(MPI_Comm comm, const char *name, moe_comm_t **out);

#ifdef __cplusplus
}
#endif

#endif /* MOE_ENGINE_COMM_MPI_H */
