import { CycliumOutput } from '../entities/output.entity.js';
import { rowMapper, type RowMapper } from '../entities/row-mapper.js';

/** Maps a `cyclium_outputs` row as pg returns it onto the entity's shape. */
export const toOutput: RowMapper<CycliumOutput> = rowMapper(CycliumOutput);
