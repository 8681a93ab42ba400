// Neural-network rows (placeholder while the real file is written).
#include "lowering/helpers.h"
