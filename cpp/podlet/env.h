// On/off switches read from the environment (PODLET_CONV_WINOGRAD, PODLET_BF16_DOT, ...).
#pragma once

namespace podlet {

// `name` unset or empty: `unset`; 0 / false / off / no (any case): off; anything else: on.
bool env_flag(const char* name, bool unset);

}  // namespace podlet
