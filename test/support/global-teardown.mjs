export default async function globalTeardown() {
  await globalThis.__cycliumPostgres?.stop();
}
